"""The OpenAI Agents SDK with Loom as the agent's session: `get_items` returns Loom's render of
the conversation (budget-fitted, cache-stable), and every item the agent adds is logged.

    OPENAI_BASE_URL=http://127.0.0.1:9000/v1 OPENAI_API_KEY=sk-test python examples/python/agents_session.py
"""

import asyncio
import os

from agents import Agent, OpenAIResponsesModel, Runner
from openai import AsyncOpenAI

import loom
from loom.agents import LoomSession

db = loom.open(":memory:")
session = LoomSession("support-1", db=db, model="gpt-4o", budget=8_000)
model = OpenAIResponsesModel(model="gpt-4o", openai_client=AsyncOpenAI(base_url=os.environ.get("OPENAI_BASE_URL")))
agent = Agent(name="support", instructions="Answer briefly.", model=model)


async def main() -> None:
    for question in ["My order 1042 has not arrived.", "It was due on Monday."]:
        result = await Runner.run(agent, question, session=session)
        print(f"> {question}\n{result.final_output}")
    items = await session.get_items()
    print(len(items), "items in the next request; receipt estimate:", session.last_receipt["estimate"])


asyncio.run(main())
