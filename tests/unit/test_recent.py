"""The prompt's recent lines (domain/memory/recent.py, render_prompt): what conversations taught since
the last summary, never what the summary already holds, inside the block's budget."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st
from user_memory.domain.memory.recent import NotedMemory, recent_items
from user_memory.domain.memory.render import estimate_tokens, render_memory, render_prompt

T0 = datetime(2030, 5, 2, 10, 0, tzinfo=UTC)
DOCUMENT = {"summary": "Night-shift nurse in Porto.", "safety_notes": "", "parts": {}, "triggers_and_goals": []}


def memory(learned=(), decisions=(), open_loops=()) -> dict:
    return {
        "discussed": "d",
        "learned_about_user": list(learned),
        "decisions": list(decisions),
        "open_loops": list(open_loops),
        "tone": "calm",
    }


def noted(cid: str, mem: dict, *, pending: bool = True, minutes: int = 0) -> NotedMemory:
    return NotedMemory(conversation_id=cid, pending=pending, occurred_at=T0 + timedelta(minutes=minutes), memory=mem)


def test_a_pending_memorys_items_are_recent_in_the_memorys_order():
    # Given one conversation's pending memory
    rows = [noted("a", memory(["Lives in Porto"], ["Keeps a sleep diary"], ["Book a physio"]))]
    # When the recent items are chosen
    lines = [i.line for i in recent_items(rows)]
    # Then each is a line marked recent, learned first, then decisions, then open loops
    assert lines == [
        "Recent - learned: Lives in Porto",
        "Recent - decided: Keeps a sleep diary",
        "Recent - open loop: Book a physio",
    ]


def test_what_a_consumed_memory_of_the_conversation_holds_is_left_out():
    # Given a conversation whose earlier memory a version consumed, and its newer pending memory
    rows = [
        noted("a", memory(["Lives in Porto"], ["Keeps a sleep diary"]), pending=False),
        noted("a", memory(["lives  in PORTO", "Prefers green tea"], ["Keeps a sleep diary"]), minutes=5),
    ]
    # When the recent items are chosen
    # Then only the item the consumed memory lacks is recent (case and spacing do not matter)
    assert [i.text for i in recent_items(rows)] == ["Prefers green tea"]


def test_another_conversations_consumed_memory_does_not_hide_an_item():
    # Given conversation b's consumed memory and conversation a's pending one, saying the same
    rows = [noted("b", memory(["Lives in Porto"]), pending=False), noted("a", memory(["Lives in Porto"]))]
    # Then the item is recent: no version took a's memory in
    assert [i.text for i in recent_items(rows)] == ["Lives in Porto"]


def test_what_the_document_already_says_is_left_out_as_whole_words_only():
    # Given a document that says "Night-shift nurse in Porto." and memories saying part of it or not
    rows = [noted("a", memory(["nurse in Porto", "urse"]))]
    # Then the words it holds are left out, a fragment of a word is not
    assert [i.text for i in recent_items(rows, document_text="Summary: Night-shift nurse in Porto.")] == ["urse"]


def test_an_item_said_in_two_conversations_is_shown_once_from_the_newest():
    rows = [noted("old", memory(["Prefers tea"]), minutes=1), noted("new", memory(["prefers TEA"]), minutes=9)]
    [item] = recent_items(rows)
    assert (item.conversation_id, item.text) == ("new", "prefers TEA")


def test_without_recent_memories_the_prompt_is_the_document_block():
    # Given no noted memories
    rendered = render_prompt(DOCUMENT, 800)
    # Then the block is render_memory's and its ETag the version alone
    assert rendered.text == render_memory(DOCUMENT, 800) and rendered.recent == 0
    assert rendered.etag(3) == '"3"'


def test_recent_lines_follow_the_document_and_change_the_etag():
    rendered = render_prompt(DOCUMENT, 800, recent=[noted("a", memory(["Prefers green tea"]))])
    assert rendered.text == "Summary: Night-shift nurse in Porto.\nRecent - learned: Prefers green tea"
    assert rendered.recent == 1 and rendered.etag(3).startswith('"3+')


TEXT = st.text(alphabet="abcdefgh XYZ", min_size=1, max_size=30).filter(str.strip)
MEMORIES = st.builds(
    memory,
    learned=st.lists(TEXT, max_size=4),
    decisions=st.lists(TEXT, max_size=3),
    open_loops=st.lists(TEXT, max_size=3),
)
ROWS = st.lists(
    st.builds(
        noted,
        st.sampled_from(["a", "b", "c"]),
        MEMORIES,
        pending=st.booleans(),
        minutes=st.integers(min_value=0, max_value=60),
    ),
    max_size=6,
).map(
    # at most one pending and one consumed row per conversation, as the store reads them
    lambda rows: list({(r.conversation_id, r.pending): r for r in rows}.values())
)


def _key(text: str) -> str:
    return " ".join(text.split()).casefold()


@settings(max_examples=300, deadline=None)
@given(rows=ROWS, budget=st.integers(min_value=1, max_value=200))
def test_recent_lines_never_repeat_what_the_summary_holds_and_stay_in_the_budget(rows, budget):
    # When the prompt is rendered with any noted memories and any budget
    rendered = render_prompt(DOCUMENT, budget, recent=rows)
    shown = [line for line in rendered.text.splitlines() if line.startswith("Recent - ")]
    texts = [line.split(": ", 1)[1] for line in shown]
    # Then no recent item is one a consumed memory of its conversation holds
    consumed = {
        (r.conversation_id, _key(t))
        for r in rows
        if not r.pending
        for field in ("learned_about_user", "decisions", "open_loops")
        for t in r.memory[field]
    }
    for item in recent_items(rows, document_text=render_memory(DOCUMENT, 10_000)):
        assert (item.conversation_id, _key(item.text)) not in consumed
    # And none is shown twice, and each comes from a pending memory
    assert len({_key(t) for t in texts}) == len(texts)
    pending = {
        _key(t)
        for r in rows
        if r.pending
        for f in ("learned_about_user", "decisions", "open_loops")
        for t in r.memory[f]
    }
    assert {_key(t) for t in texts} <= pending
    # And the count is the lines shown, and the block keeps the budget unless it is the marker alone
    assert rendered.recent == len(shown)
    assert estimate_tokens(rendered.text) <= budget or rendered.text.startswith("[memory truncated")


def test_a_summary_committing_between_the_reads_is_neither_lost_nor_shown_twice():
    # Given a user's memory service whose noted memories are read after its head, and a summary
    # that commits between the two reads (version 1 holds the fact and marks its memory summarized)
    import uuid

    from user_memory.adapters.memory import InMemoryActivity, InMemoryRecorder
    from user_memory.domain.memory.repository import MemoryStore
    from user_memory.domain.service import MemoryService

    user = uuid.uuid4()
    activity = InMemoryActivity()
    recorder = InMemoryRecorder(activity)
    store = MemoryStore(recorder)

    class SummaryInBetween:
        """The noted memories as the database would answer them: the summary commits just before the
        first read, which (and every read after) sees the memory consumed at version 1."""

        def __init__(self) -> None:
            self.reads = 0

        def noted(self, user_id):
            self.reads += 1
            if self.reads == 1:
                store.append(user, {**DOCUMENT, "summary": "Prefers green tea."}, expected_version=0, source="s")
            return [noted("a", memory(["Prefers green tea"]), pending=False)], 1

    service = MemoryService(user_id=user, store=store, recent=SummaryInBetween())
    # When the prompt is read
    head, rendered = service.prompt(800)
    # Then it is version 1's: the fact is there, once, from the summary (not lost between the reads)
    assert head.version == 1 and rendered.recent == 0
    assert rendered.text == "Summary: Prefers green tea."
