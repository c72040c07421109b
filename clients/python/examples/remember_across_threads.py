"""A LangGraph graph that remembers a user across threads, its long-term memory in user-memory.

Each thread is a conversation (its own checkpoint); what the user tells in one thread is stored in
the user's key-value memory through `UserMemoryStore`, and every other thread reads it back. No
LLM: the "agent" notes "remember <fact>" messages and answers with what it knows.

    user-memory serve &                          # the API on http://127.0.0.1:8080
    TOKEN=$(user-memory token <user id>)         # a development token for that user
    python remember_across_threads.py http://127.0.0.1:8080 <user id> "$TOKEN"
"""

from __future__ import annotations

import sys
import uuid
from typing import TypedDict

from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from langgraph.store.base import BaseStore
from user_memory_client.langgraph_store import UserMemoryStore


class Context(TypedDict):
    user_id: str


class State(TypedDict):
    message: str
    answer: str


def remember(state: State, runtime: Runtime[Context]) -> dict[str, str]:
    """Store a fact the user asks to be remembered; answer with every fact known about the user."""
    store = runtime.store
    assert store is not None
    namespace = (runtime.context["user_id"], "memories")
    if state["message"].lower().startswith("remember "):
        fact = state["message"][len("remember ") :].strip()
        store.put(namespace, str(uuid.uuid5(uuid.NAMESPACE_URL, fact)), {"fact": fact})
    facts = sorted(item.value["fact"] for item in store.search(namespace, limit=100))
    return {"answer": "I know: " + "; ".join(facts) if facts else "I know nothing about you yet."}


def build(store: BaseStore):  # noqa: ANN201 - LangGraph's compiled graph type is generic and long
    """The graph: one node, a checkpointer per thread, the store shared by every thread."""
    graph = StateGraph(State, context_schema=Context)
    graph.add_node("remember", remember)
    graph.add_edge(START, "remember")
    graph.add_edge("remember", END)
    return graph.compile(checkpointer=InMemorySaver(), store=store)


def main(base_url: str, user_id: str, token: str) -> None:
    with UserMemoryStore(base_url, lambda _user: token) as store:
        app = build(store)
        context = Context(user_id=user_id)
        first = {"configurable": {"thread_id": "monday"}}
        second = {"configurable": {"thread_id": "friday"}}
        print(app.invoke({"message": "remember I prefer tea"}, first, context=context)["answer"])
        print(app.invoke({"message": "what do you know?"}, second, context=context)["answer"])


if __name__ == "__main__":
    if len(sys.argv) != 4:  # the three arguments, or how to call it (not a traceback)
        sys.exit(f"usage: python {sys.argv[0]} BASE_URL USER_ID TOKEN\n{__doc__.split(chr(10) * 2, 2)[2].rstrip()}")
    main(*sys.argv[1:4])
