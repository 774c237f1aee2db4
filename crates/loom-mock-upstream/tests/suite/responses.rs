//! OpenAI Responses: the response object, its numbered event stream, reasoning items and
//! function calls.

use serde_json::{json, Value};

use super::{post_json, post_sse, spawn, without_clock};

const PATH: &str = "/v1/responses";

fn function(name: &str) -> Value {
    json!({"type": "function", "name": name, "parameters": {"type": "object"}})
}

#[tokio::test]
async fn string_input_gets_a_message() {
    let mock = spawn().await;
    let body = json!({"model": "gpt-4o", "input": "tell me a joke", "instructions": "be funny"});
    let reply = post_json(&mock, PATH, &body, 200).await;
    assert_eq!(reply["object"], "response");
    assert_eq!(reply["status"], "completed");
    assert_eq!(reply["instructions"], "be funny");
    assert!(reply["id"].as_str().unwrap().starts_with("resp_"));
    let output = reply["output"].as_array().unwrap();
    assert_eq!(output.len(), 1);
    assert_eq!(output[0]["type"], "message");
    assert_eq!(output[0]["role"], "assistant");
    assert_eq!(output[0]["content"][0]["type"], "output_text");
    assert_eq!(
        output[0]["content"][0]["text"],
        "ok: 1 messages, last: tell me a joke"
    );
    let usage = &reply["usage"];
    assert_eq!(usage["input_tokens_details"]["cached_tokens"], 0);
    assert_eq!(
        usage["total_tokens"],
        usage["input_tokens"].as_u64().unwrap() + usage["output_tokens"].as_u64().unwrap()
    );
}

#[tokio::test]
async fn reasoning_then_function_call_then_text_after_output() {
    let mock = spawn().await;
    let mut input = vec![
        json!({"role": "user", "content": [{"type": "input_text", "text": "list the files here"}]}),
    ];
    let body = json!({"model": "o3", "input": input, "tools": [function("ls"), function("cat")], "reasoning": {"effort": "low", "summary": "auto"}});
    let reply = post_json(&mock, PATH, &body, 200).await;
    let output = reply["output"].as_array().unwrap();
    let kinds: Vec<&str> = output.iter().map(|i| i["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["reasoning", "function_call"]);
    let reasoning = &output[0];
    assert!(reasoning["id"].as_str().unwrap().starts_with("rs_"));
    assert_eq!(reasoning["summary"][0]["type"], "summary_text");
    assert!(!reasoning["encrypted_content"].as_str().unwrap().is_empty());
    let call = &output[1];
    assert!(call["id"].as_str().unwrap().starts_with("fc_"));
    assert!(call["call_id"].as_str().unwrap().starts_with("call_"));
    assert_eq!(call["name"], "ls");
    assert!(
        reply["usage"]["output_tokens_details"]["reasoning_tokens"]
            .as_u64()
            .unwrap()
            > 0
    );

    input.extend(output.iter().cloned());
    input.push(json!({"type": "function_call_output", "call_id": call["call_id"], "output": "a.txt b.txt"}));
    let body = json!({"model": "o3", "input": input, "tools": [function("ls")]});
    let reply = post_json(&mock, PATH, &body, 200).await;
    let output = reply["output"].as_array().unwrap();
    assert_eq!(output.len(), 1);
    assert_eq!(
        output[0]["content"][0]["text"],
        "ok: 4 messages, last: a.txt b.txt"
    );
    assert!(
        reply["usage"]["input_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap()
            > 0
    );
}

#[tokio::test]
async fn stream_events_are_numbered_and_rebuild_the_response() {
    let body = json!({"model": "o3", "input": "call things in parallel", "tools": [function("a"), function("b")], "reasoning": {"effort": "low"}});
    let json_reply = post_json(&spawn().await, PATH, &body, 200).await;
    let mut stream_body = body.clone();
    stream_body["stream"] = json!(true);
    let events = post_sse(&spawn().await, PATH, &stream_body).await;

    let mut output: Vec<Value> = Vec::new();
    let mut arguments: Vec<String> = Vec::new();
    let mut summary = String::new();
    for (n, event) in events.iter().enumerate() {
        let data = event.json();
        assert_eq!(Some(data["type"].as_str().unwrap()), event.name.as_deref());
        assert_eq!(data["sequence_number"], n);
        match data["type"].as_str().unwrap() {
            "response.created" | "response.in_progress" => {
                assert_eq!(data["response"]["status"], "in_progress");
                assert_eq!(data["response"]["output"], json!([]));
            }
            "response.output_item.added" => {
                assert_eq!(data["output_index"], output.len());
                output.push(data["item"].clone());
                arguments.push(String::new());
            }
            "response.function_call_arguments.delta" => {
                arguments[data["output_index"].as_u64().unwrap() as usize]
                    .push_str(data["delta"].as_str().unwrap());
            }
            "response.function_call_arguments.done" => {
                let index = data["output_index"].as_u64().unwrap() as usize;
                assert_eq!(data["arguments"].as_str().unwrap(), arguments[index]);
                assert_eq!(data["item_id"], output[index]["id"]);
            }
            "response.reasoning_summary_text.delta" => {
                summary.push_str(data["delta"].as_str().unwrap())
            }
            "response.output_item.done" => {
                output[data["output_index"].as_u64().unwrap() as usize] = data["item"].clone();
            }
            _ => {}
        }
    }
    let last = events.last().unwrap().json();
    assert_eq!(last["type"], "response.completed");
    assert_eq!(
        without_clock(last["response"].clone()),
        without_clock(json_reply)
    );
    assert_eq!(Value::Array(output.clone()), last["response"]["output"]);
    assert_eq!(summary, output[0]["summary"][0]["text"].as_str().unwrap());
    assert_eq!(arguments[1], output[1]["arguments"].as_str().unwrap());
    assert_eq!(arguments[2], output[2]["arguments"].as_str().unwrap());
}

#[tokio::test]
async fn stream_text_deltas_rebuild_the_text() {
    let mock = spawn().await;
    let body = json!({"model": "gpt-4o", "stream": true, "input": [{"role": "user", "content": "a few words to echo back"}]});
    let events = post_sse(&mock, PATH, &body).await;
    let datas: Vec<Value> = events.iter().map(|e| e.json()).collect();
    let text: String = datas
        .iter()
        .filter(|d| d["type"] == "response.output_text.delta")
        .map(|d| d["delta"].as_str().unwrap())
        .collect();
    let done = datas
        .iter()
        .find(|d| d["type"] == "response.output_text.done")
        .unwrap();
    assert_eq!(done["text"].as_str().unwrap(), text);
    assert_eq!(text, "ok: 1 messages, last: a few words to echo back");
    let kinds: Vec<&str> = datas.iter().map(|d| d["type"].as_str().unwrap()).collect();
    let expected_order = [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ];
    let mut at = 0;
    for kind in expected_order {
        at += kinds[at..]
            .iter()
            .position(|k| *k == kind)
            .unwrap_or_else(|| panic!("{kind} missing or out of order in {kinds:?}"));
    }
}
