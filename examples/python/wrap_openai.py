"""`loom.wrap`: an OpenAI client whose every `create` sends Loom's render of the conversation
(within the budget, cache-stable) and whose replies and usage are logged.

    OPENAI_BASE_URL=http://127.0.0.1:9000/v1 OPENAI_API_KEY=sk-test python examples/python/wrap_openai.py
"""

import openai

import loom

db = loom.open(":memory:")
client = loom.wrap(openai.OpenAI(), session="chat-1", db=db, budget=4_000)
messages = [{"role": "system", "content": "You are terse."}]
for question in ["What is a context window?", "And a prompt cache?", "Why do both matter for agents?"]:
    messages.append({"role": "user", "content": question})
    reply = client.chat.completions.create(model="gpt-4o", messages=messages)
    answer = reply.choices[0].message.content
    messages.append({"role": "assistant", "content": answer})
    print(f"> {question}\n{answer}")

calls = db.session("chat-1").model_calls()
print(len(calls), "model calls logged; usage of the last:", calls[-1]["usage"])
