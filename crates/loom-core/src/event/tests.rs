use super::*;

#[test]
fn ids_reject_empty_and_control_chars() {
    assert!(SessionId::new("").is_err());
    assert!(SessionId::new("a\nb").is_err());
    assert!(SessionId::new("x".repeat(2049)).is_err());
    assert_eq!(SessionId::new("traj/1").unwrap().as_str(), "traj/1");
}

#[test]
fn blob_ref_round_trips_through_json() {
    let r = BlobRef::from_hex(&"ab".repeat(32)).unwrap();
    let json = serde_json::to_string(&r).unwrap();
    assert_eq!(json, format!("\"sha256:{}\"", "ab".repeat(32)));
    assert_eq!(serde_json::from_str::<BlobRef>(&json).unwrap(), r);
    assert!(serde_json::from_str::<BlobRef>("\"sha256:xyz\"").is_err());
}

#[test]
fn event_json_is_flat_and_tagged() {
    let e = Event {
        seq: 3,
        ts_ms: 1_700_000_000_000,
        body: EventBody::Assistant {
            content: None,
            reasoning: None,
            tool_calls: vec![ToolCall {
                id: "c1".into(),
                name: "bash".into(),
                arguments: "{\"command\":\"ls\"}".into(),
            }],
            name: None,
            native: None,
        },
    };
    let json = serde_json::to_string(&e).unwrap();
    assert_eq!(
        json,
        r#"{"seq":3,"ts_ms":1700000000000,"kind":"assistant","tool_calls":[{"id":"c1","name":"bash","arguments":"{\"command\":\"ls\"}"}]}"#
    );
    assert_eq!(serde_json::from_str::<Event>(&json).unwrap(), e);
}

#[test]
fn direct_message_priority_defaults_and_is_checked() {
    let body: EventBody = serde_json::from_str(
        r#"{"kind":"direct_message","source":"a","target":"b","content":"hi"}"#,
    )
    .unwrap();
    match &body {
        EventBody::DirectMessage { priority, .. } => assert_eq!(*priority, DEFAULT_PRIORITY),
        other => panic!("unexpected {other:?}"),
    }
    body.validate().unwrap();
    let bad: EventBody = serde_json::from_str(
        r#"{"kind":"direct_message","source":"a","target":"b","content":"hi","priority":1.5}"#,
    )
    .unwrap();
    assert!(
        matches!(bad.validate(), Err(LogError::InvalidField { field, .. }) if field == "priority")
    );
}

#[test]
fn native_items_must_be_replayable_by_their_api() {
    let turn = |api: Api, item: serde_json::Value| EventBody::Assistant {
        content: Some("ok".into()),
        reasoning: None,
        tool_calls: Vec::new(),
        name: None,
        native: Some(NativeReasoning {
            api,
            items: vec![item],
        }),
    };
    let field = |body: EventBody| match body.validate() {
        Err(LogError::InvalidField { field, .. }) => field,
        other => panic!("expected an invalid field, got {other:?}"),
    };
    let signed = serde_json::json!({"type": "thinking", "thinking": "t", "signature": "s"});
    turn(Api::Anthropic, signed.clone()).validate().unwrap();
    turn(
        Api::OpenaiResponses,
        serde_json::json!({"type": "reasoning", "id": "rs_1", "summary": []}),
    )
    .validate()
    .unwrap();
    assert_eq!(
        field(turn(Api::OpenaiResponses, signed)),
        "native.items[0].type"
    );
    assert_eq!(
        field(turn(
            Api::Anthropic,
            serde_json::json!({"type": "thinking", "thinking": "t"})
        )),
        "native.items[0].signature"
    );
    assert_eq!(
        field(turn(
            Api::Anthropic,
            serde_json::json!({"type": "redacted_thinking", "data": 5})
        )),
        "native.items[0].data"
    );
    assert_eq!(
        field(turn(Api::Anthropic, serde_json::json!("thinking"))),
        "native.items[0].type"
    );
    // The JSON form names the api in kebab-case.
    let json = serde_json::to_value(turn(
        Api::OpenaiResponses,
        serde_json::json!({"type": "reasoning", "id": "rs_1"}),
    ))
    .unwrap();
    assert_eq!(json["native"]["api"], "openai-responses");
}

#[test]
fn content_text_joins_text_parts() {
    let c = MessageContent::Parts(vec![
        ContentPart::Text { text: "a".into() },
        ContentPart::Image {
            url: "data:image/png;base64,AA".into(),
            detail: None,
        },
        ContentPart::Text { text: "b".into() },
    ]);
    assert_eq!(c.text(), "a\nb");
}
