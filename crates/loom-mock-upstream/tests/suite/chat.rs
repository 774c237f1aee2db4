//! OpenAI Chat Completions: bodies, chunks, tool calls, usage and the simulated cache.

use serde_json::{json, Value};

use super::{post, post_json, post_sse, spawn, JsonReply as _};

const PATH: &str = "/v1/chat/completions";

fn tools(names: &[&str]) -> Value {
    Value::Array(
        names
            .iter()
            .map(|n| json!({"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}))
            .collect(),
    )
}

#[tokio::test]
async fn text_reply_without_tools() {
    let mock = spawn().await;
    let body = json!({"model": "gpt-4o", "messages": [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hello there, how are you doing today?"},
    ]});
    let resp = post(&mock, PATH, &body).await;
    assert!(resp.headers().contains_key("x-request-id"));
    let reply: Value = resp.json_value().await;
    assert_eq!(reply["object"], "chat.completion");
    assert_eq!(reply["model"], "gpt-4o");
    let choice = &reply["choices"][0];
    assert_eq!(choice["finish_reason"], "stop");
    assert_eq!(choice["message"]["role"], "assistant");
    assert_eq!(
        choice["message"]["content"],
        "ok: 2 messages, last: hello there, how are you doing"
    );
    assert!(choice["message"].get("tool_calls").is_none());
    let usage = &reply["usage"];
    assert!(usage["prompt_tokens"].as_u64().unwrap() > 0);
    assert_eq!(
        usage["total_tokens"],
        usage["prompt_tokens"].as_u64().unwrap() + usage["completion_tokens"].as_u64().unwrap()
    );
    assert_eq!(usage["prompt_tokens_details"]["cached_tokens"], 0);
    assert_eq!(usage["completion_tokens_details"]["reasoning_tokens"], 0);

    let recorded = mock.requests();
    assert_eq!(recorded.len(), 1);
    assert_eq!(recorded[0].path, PATH);
    assert_eq!(recorded[0].header("Authorization"), Some("Bearer sk-test"));
    assert_eq!(recorded[0].body, body);
}

#[tokio::test]
async fn user_turn_with_tools_calls_first_tool_then_tool_result_gets_text() {
    let mock = spawn().await;
    let mut messages = vec![json!({"role": "user", "content": "find the weather in Paris"})];
    let body = json!({"model": "gpt-4o", "messages": messages, "tools": tools(&["get_weather", "search"])});
    let reply = post_json(&mock, PATH, &body, 200).await;
    let message = &reply["choices"][0]["message"];
    assert_eq!(reply["choices"][0]["finish_reason"], "tool_calls");
    assert_eq!(message["content"], Value::Null);
    let calls = message["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0]["type"], "function");
    assert_eq!(calls[0]["function"]["name"], "get_weather");
    let args: Value =
        serde_json::from_str(calls[0]["function"]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(args, json!({"query": "find the weather in Paris"}));
    let id = calls[0]["id"].as_str().unwrap().to_owned();
    assert!(id.starts_with("call_"));

    messages.push(message.clone());
    messages.push(json!({"role": "tool", "tool_call_id": id, "content": "sunny, 21 C"}));
    let body = json!({"model": "gpt-4o", "messages": messages, "tools": tools(&["get_weather", "search"])});
    let reply = post_json(&mock, PATH, &body, 200).await;
    assert_eq!(
        reply["choices"][0]["message"]["content"],
        "ok: 3 messages, last: sunny, 21 C"
    );
    assert_eq!(reply["choices"][0]["finish_reason"], "stop");
}

#[tokio::test]
async fn parallel_calls_have_distinct_ids_across_replies() {
    let mock = spawn().await;
    let body = json!({"model": "gpt-4o", "messages": [{"role": "user", "content": "run both in parallel"}], "tools": tools(&["a", "b", "c"])});
    let mut ids = Vec::new();
    for _ in 0..2 {
        let reply = post_json(&mock, PATH, &body, 200).await;
        let calls = reply["choices"][0]["message"]["tool_calls"]
            .as_array()
            .unwrap()
            .clone();
        let names: Vec<&str> = calls
            .iter()
            .map(|c| c["function"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["a", "b"]);
        ids.extend(calls.iter().map(|c| c["id"].as_str().unwrap().to_owned()));
    }
    let mut unique = ids.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), ids.len(), "{ids:?}");
}

#[tokio::test]
async fn stream_with_usage_reassembles_to_the_json_reply() {
    let body = json!({"model": "gpt-4o", "messages": [{"role": "user", "content": "say something long enough to split"}]});
    let json_reply = post_json(&spawn().await, PATH, &body, 200).await;
    let mut stream_body = body.clone();
    stream_body["stream"] = json!(true);
    stream_body["stream_options"] = json!({"include_usage": true});
    let events = post_sse(&spawn().await, PATH, &stream_body).await;

    assert_eq!(events.last().unwrap().data, "[DONE]");
    let chunks: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|e| e.json())
        .collect();
    assert!(events.iter().all(|e| e.name.is_none()));
    assert!(chunks
        .iter()
        .all(|c| c["object"] == "chat.completion.chunk" && c["id"] == json_reply["id"]));
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let text: String = chunks
        .iter()
        .filter_map(|c| {
            c["choices"]
                .get(0)
                .and_then(|ch| ch["delta"]["content"].as_str())
        })
        .collect();
    assert_eq!(
        text,
        json_reply["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
    );
    assert!(chunks.len() > 3, "text arrives in several deltas");
    let (usage_chunk, rest) = chunks.split_last().unwrap();
    assert_eq!(usage_chunk["choices"], json!([]));
    assert_eq!(usage_chunk["usage"], json_reply["usage"]);
    assert!(rest
        .iter()
        .all(|c| c["usage"].is_null() && c.get("usage").is_some()));
    assert_eq!(rest.last().unwrap()["choices"][0]["finish_reason"], "stop");
}

#[tokio::test]
async fn stream_tool_calls_reassemble_by_index() {
    let mock = spawn().await;
    let body = json!({"model": "gpt-4o", "stream": true, "messages": [{"role": "user", "content": "do two things in parallel now"}], "tools": tools(&["alpha", "beta"])});
    let events = post_sse(&mock, PATH, &body).await;
    assert_eq!(events.last().unwrap().data, "[DONE]");
    let mut calls: Vec<(String, String, String)> = Vec::new();
    let mut finish = Value::Null;
    for event in &events[..events.len() - 1] {
        let chunk = event.json();
        assert!(
            chunk.get("usage").is_none(),
            "no usage without include_usage"
        );
        let choice = &chunk["choices"][0];
        if !choice["finish_reason"].is_null() {
            finish = choice["finish_reason"].clone();
        }
        for delta in choice["delta"]["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let index = delta["index"].as_u64().unwrap() as usize;
            if let Some(id) = delta["id"].as_str() {
                assert_eq!(index, calls.len());
                calls.push((
                    id.to_owned(),
                    delta["function"]["name"].as_str().unwrap().to_owned(),
                    String::new(),
                ));
            }
            calls[index]
                .2
                .push_str(delta["function"]["arguments"].as_str().unwrap());
        }
    }
    assert_eq!(finish, "tool_calls");
    assert_eq!(calls.len(), 2);
    assert_eq!(
        (calls[0].1.as_str(), calls[1].1.as_str()),
        ("alpha", "beta")
    );
    for (_, _, args) in &calls {
        let args: Value = serde_json::from_str(args).unwrap();
        assert_eq!(args["query"], "do two things in parallel now");
    }
    assert_ne!(calls[0].0, calls[1].0);
}

#[tokio::test]
async fn reasoning_models_count_reasoning_tokens() {
    let mock = spawn().await;
    let body = json!({"model": "o3-mini", "messages": [{"role": "user", "content": "think"}]});
    let reply = post_json(&mock, PATH, &body, 200).await;
    let usage = &reply["usage"];
    let reasoning = usage["completion_tokens_details"]["reasoning_tokens"]
        .as_u64()
        .unwrap();
    assert!(reasoning > 0 && reasoning < usage["completion_tokens"].as_u64().unwrap());
}

#[tokio::test]
async fn cached_tokens_grow_as_the_conversation_grows() {
    let mock = spawn().await;
    let mut messages = vec![
        json!({"role": "system", "content": "You are a careful assistant. ".repeat(20)}),
        json!({"role": "user", "content": "first question"}),
    ];
    let mut previous_cached = 0;
    let mut previous_input = 0;
    for turn in 0..4 {
        let body = json!({"model": "gpt-4o", "messages": messages});
        let reply = post_json(&mock, PATH, &body, 200).await;
        let usage = &reply["usage"];
        let input = usage["prompt_tokens"].as_u64().unwrap();
        let cached = usage["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap();
        assert!(cached <= input);
        if turn == 0 {
            assert_eq!(cached, 0);
        } else {
            assert!(
                cached > previous_cached,
                "turn {turn}: cached {cached} after {previous_cached}"
            );
            // Everything the previous request held, bar its closing bracket, is a prefix.
            assert!(
                cached + 1 >= previous_input,
                "turn {turn}: cached {cached}, previous input {previous_input}"
            );
        }
        previous_cached = cached;
        previous_input = input;
        messages.push(reply["choices"][0]["message"].clone());
        messages.push(json!({"role": "user", "content": format!("follow-up number {turn}")}));
    }
    // A different conversation shares little with the last one.
    let body = json!({"model": "gpt-4o", "messages": [{"role": "user", "content": "unrelated"}]});
    let reply = post_json(&mock, PATH, &body, 200).await;
    assert!(
        reply["usage"]["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap()
            < 5
    );
}
