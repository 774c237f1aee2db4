"""LangChain with Loom: a chat history kept in Loom's log, and `trim_messages` counting with
Loom's exact tokenizer instead of an approximation.

    python examples/python/langchain_history.py
"""

from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, trim_messages

import loom
from loom.langchain import LoomChatMessageHistory, token_counter

db = loom.open(":memory:")
history = LoomChatMessageHistory("lc-1", db=db, model="gpt-4o", budget=6_000)
history.add_messages([
    SystemMessage("You are a release assistant."),
    HumanMessage("Summarise the changes since v1.2."),
    AIMessage("Three fixes and one feature: " + "details " * 200),
    HumanMessage("Which fix matters most?"),
])
print(len(history.messages), "messages in Loom's render of the history")

# The same messages trimmed by LangChain, counted exactly.
trimmed = trim_messages(history.messages, max_tokens=150, strategy="last", start_on="human",
                        include_system=True, token_counter=token_counter)
print(len(trimmed), "messages after trim_messages at 150 tokens:", [m.type for m in trimmed])
