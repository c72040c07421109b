"""The console, used as a person would: Debian's Chromium against `user-memory serve` on the
embedded PostgreSQL. Each test opens the page signed in (a development token in the URL, or the
OpenID Connect sign-in), acts through the page, and checks what the page shows and, for writes,
what the API then holds."""

from __future__ import annotations

import json
import re
import urllib.request
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from user_memory.adapters.postgres import PostgresRecorder
from user_memory.domain.memory.repository import MemoryStore

from tests.browser import seed
from tests.browser.conftest import AXE, Console, OidcConsole

pytestmark = pytest.mark.browser
expect = pytest.importorskip("playwright.sync_api").expect


def today_monday() -> str:
    today = datetime.now(UTC).date()
    return (today - timedelta(days=today.weekday())).isoformat()


def ready(page: Any, view: str, *, user: str | None = None) -> None:
    """Wait until `view` has rendered; with `user`, the view of that user (the address changing
    from one user's timeline to another's routes on the next event, so the old timeline's mark
    must not count)."""
    if user is not None:
        page.locator("#view-title", has_text=user).wait_for()
    page.wait_for_selector(f'main[data-ready="{view}"]')


def open_view(page: Any, console: Console, user: str, hash_: str = "", *, operator: bool = False) -> None:
    page.goto(console.signed_in(user, operator=operator))
    ready(page, "memory")
    if hash_:
        page.evaluate("h => { location.hash = h }", hash_)
        ready(page, hash_.split("/")[1].split("?")[0])


def head(console: Console, user: str) -> dict:
    return seed.ok(seed.call(console.url, "GET", "/me/memory", console.token(user)))


@pytest.fixture(scope="module")
def rich(console: Console) -> str:
    """A user with nightly runs (provenance), an API edit, companion elements, key-value entries
    and a conversation with its memory."""
    user = str(uuid.uuid4())
    token = console.token(user)
    seed.nightly_runs(console.pool, user)
    seed.companion(console.url, token, datetime.now(UTC))
    seed.kv(console.url, token)
    seed.conversation(console.url, token, console.pool, user)
    return user


# -- served safely -----------------------------------------------------------------------------------


def test_the_page_is_public_with_a_strict_csp_and_no_inline_script(oidc_console: OidcConsole):
    console = oidc_console
    # When the page and its script are fetched without a token
    with urllib.request.urlopen(console.url + "/console", timeout=10) as response:
        page, policy = response.read().decode(), response.headers["Content-Security-Policy"]
    # Then they are served, under a policy that allows scripts only from this origin
    assert "script-src 'self'" in policy and "unsafe-inline" not in policy and "unsafe-eval" not in policy
    assert "frame-ancestors 'none'" in policy and console.issuer.url in policy
    # And the page has no inline script or style, nor an event handler attribute
    assert not re.search(r"<script(?![^>]*\bsrc=)", page) and "<style" not in page and " on" not in page.lower()
    # And `serve` said where the console is and where it signs in
    assert f"console:  {console.url}/console   (signs in at {console.issuer.url})" in console.log.read_text()
    with urllib.request.urlopen(console.url + "/console/app.js", timeout=10) as response:
        assert response.headers["Content-Type"].startswith("text/javascript")
    # And nothing else of the package is reachable through it
    for name in ("..%2Fopenapi.json", "missing.js", ".hidden.js"):
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"{console.url}/console/{name}", timeout=10)
        assert refused.value.code == 404


def test_swagger_ui_runs_under_its_policy_and_keeps_no_token(page, console: Console, user: str):
    # Given Swagger UI in a browser that reports every policy violation
    violations: list[str] = []
    page.on("console", lambda m: violations.append(m.text) if "Content Security Policy" in m.text else None)
    page.goto(console.url + "/swagger")
    page.locator(".opblock-summary-path").first.wait_for()
    # When a reader authorizes with a bearer token
    page.locator("button.authorize").first.click()
    page.locator(".modal-ux input").first.fill(console.token(user))
    page.locator(".modal-ux button.authorize").click()
    page.locator(".modal-ux button.btn-done").click()
    # Then the page ran with nothing refused by its policy, and the token is kept nowhere
    assert violations == [] and page.errors == []
    assert page.evaluate("JSON.stringify(localStorage)") == "{}"
    assert page.evaluate("sessionStorage.length") == 0 and page.context.cookies() == []


def test_memory_content_stays_inert(page, console: Console):
    # Given a user whose memory, key-value entries and conversation memory hold markup
    user = str(uuid.uuid4())
    token = console.token(user)
    seed.kv(console.url, token)
    seed.conversation(console.url, token, console.pool, user)
    version = seed.api_edit(console.url, token, 0, seed.HOSTILE_NAME)
    seed.api_edit(console.url, token, version, seed.HOSTILE_SCRIPT)
    # When every view that shows content is opened
    open_view(page, console, user)
    for view in ("#/memory", "#/version/1", "#/compare/1/2", "#/kv/preferences", "#/conversations", "#/edit"):
        page.evaluate("h => { location.hash = h }", view)
        ready(page, view.split("/")[1])
        # Then the markup is shown as text, and nothing of it ran or became an element
        assert page.evaluate("window.__pwned") is None
        assert page.locator("main img, main script").count() == 0
    page.evaluate("h => { location.hash = h }", "#/compare/1/2")
    ready(page, "compare")
    assert page.get_by_text(seed.HOSTILE_NAME).first.is_visible()
    assert page.errors == []


# -- the landing: the memory as a person reads it -----------------------------------------------------


def test_the_console_opens_on_the_memory_as_a_person_reads_it_with_its_changes_beside_it(
    page, console: Console, rich: str
):
    # When the user opens the console
    page.goto(console.signed_in(rich))
    ready(page, "memory")
    memory = page.get_by_role("region", name=re.compile(r"^The memory at version \d+$"))
    # Then the memory is read as sections, its goals and to-dos as cards by their names, not as JSON
    for section in ("Basic info", "Current state", "Goals", "Todos", "Events"):
        expect(memory.get_by_role("heading", name=section, exact=True)).to_be_visible()
    goal = memory.get_by_role("article", name="Read the Rust book")
    expect(goal).to_be_visible()
    assert "Target date" in goal.inner_text() and "chapter 8" in goal.inner_text()
    expect(memory.get_by_role("article", name="File the tax return")).to_be_visible()
    expect(memory.get_by_role("article", name="Team stand-up")).to_be_visible()
    text = memory.inner_text()
    assert "Ada" in text and "learning Rust" in text and "tired but motivated" in text
    assert '{"' not in text and page.locator("main pre").count() == 0
    # And beside it (to its right, level with it), the recent changes
    recent = page.get_by_role("complementary", name="Recent changes")
    left, right = memory.bounding_box(), recent.bounding_box()
    assert right["x"] >= left["x"] + left["width"] and right["y"] < left["y"] + left["height"]
    # Each with the model's reasons in sight, without opening anything
    version_2 = recent.get_by_role("article", name="Version 2")
    expect(version_2.get_by_text("started the Rust book")).to_be_visible()
    expect(version_2.get_by_text("mentioned shipping Python and SQL at work")).to_be_visible()
    # And the rest of a run's record (model, tokens, refusals) one click away
    expect(version_2.get_by_text("removes a protected fact without a request")).to_be_hidden()
    version_2.get_by_text("Why: 2 edits applied, 1 refused").click()
    expect(version_2.get_by_text("removes a protected fact without a request")).to_be_visible()
    assert page.errors == []


def test_a_user_without_versions_lands_on_an_empty_memory_that_says_so(page, console: Console, user: str):
    open_view(page, console, user)
    assert "Nothing remembered yet" in page.locator("main").inner_text()
    assert "No versions yet." in page.get_by_role("complementary", name="Recent changes").inner_text()


def test_an_operator_lands_on_the_look_up_not_on_their_own_empty_memory(page, console: Console):
    # When an operator opens the console without naming a user
    page.goto(console.signed_in(str(uuid.uuid4()), operator=True))
    ready(page, "memory")
    # Then the page asks for a user id, focused, and says nothing of "your memory" or its versions
    expect(page.locator("#view-title")).to_have_text("Look up a user")
    main = page.locator("main").inner_text()
    assert "your memory" not in main and "versions" not in main and "No versions yet" not in main
    assert page.evaluate("document.activeElement.id") == "lookup-user"


# -- the timeline ------------------------------------------------------------------------------------


def test_the_timeline_shows_each_version_with_its_source_and_the_models_reasons(page, console: Console, rich: str):
    # When the user opens the console
    open_view(page, console, rich)
    version_2 = page.get_by_role("article", name="Version 2")
    # Then each version shows its time, source and size of change
    assert "nightly run" in version_2.inner_text() and "daily summary 2026-11-21" in version_2.inner_text()
    assert "API" in page.get_by_role("article", name="Version 4").inner_text()  # the goal, written through the API
    # And opening its reasons shows the model, each edit's reason, refused edits and why, tokens
    version_2.get_by_text("Why: 2 edits applied, 1 refused").click()
    why = version_2.inner_text()
    assert "mentioned shipping Python and SQL at work" in why and "started the Rust book" in why
    assert "refused: removes a protected fact without a request" in why
    assert seed.MODEL in why and "2,400 tokens" in why and "$0.000450" in why  # 2,200 in, 200 out


def test_a_user_with_many_versions_opens_one_page_and_loads_older_ones(page, console: Console):
    # Given a user with 120 versions
    user = str(uuid.uuid4())
    store = MemoryStore(PostgresRecorder(console.pool))
    for n in range(120):
        store.append(user, {"summary": f"day {n}"}, expected_version=n, source="api")
    # When the timeline opens
    open_view(page, console, user, "#/timeline")
    entries = page.locator("ol.timeline > li")
    # Then it shows one page, newest first, and each click loads the next older one
    assert entries.count() == 50 and "v120" in entries.first.inner_text()
    # (how many are shown is said beside the button that loads more)
    beside = page.locator(".actions", has=page.get_by_role("button", name="Load older versions"))
    expect(beside.get_by_role("status")).to_have_text("50 versions shown")
    page.get_by_role("button", name="Load older versions").click()
    expect(entries).to_have_count(100)
    page.get_by_role("button", name="Load older versions").click()
    expect(entries).to_have_count(120)
    assert "v1 " in entries.last.inner_text() + " "
    assert page.get_by_role("button", name="Load older versions").is_hidden()
    expect(page.locator(".actions").get_by_role("status")).to_have_text("120 versions shown")


def test_one_version_is_one_version_shown(page, console: Console, user: str):
    seed.api_edit(console.url, console.token(user), 0, "Ann")
    open_view(page, console, user, "#/timeline")
    expect(page.locator(".actions").get_by_role("status")).to_have_text("1 version shown")


# -- compare, as of ----------------------------------------------------------------------------------


def test_two_versions_side_by_side_with_a_readable_diff_and_the_patch_one_click_away(page, console: Console, rich: str):
    # When versions 1 and 2 are compared
    open_view(page, console, rich, "#/compare/1/2")
    changes = page.locator("ul.changes").inner_text()
    # Then the change reads as words, with the values
    assert "Added current_state › skills" in changes or "Changed current_state › skills" in changes
    assert "Python" in changes and "learning Rust" in changes
    # And both documents are shown side by side
    assert "curious" in page.get_by_label("Document at version 1").inner_text()
    assert "SQL" in page.get_by_label("Document at version 2").inner_text()
    # And the RFC 6902 patch is one click away
    patch = page.locator("details.patch pre")
    assert patch.is_hidden()
    page.get_by_text("The patch (RFC 6902)").click()
    assert '"op"' in patch.inner_text() and "/current_state/skills" in patch.inner_text()


def test_the_memory_as_of_a_date(page, console: Console, rich: str):
    open_view(page, console, rich, "#/timeline")
    # When a time before the first version is asked for
    page.get_by_label("As of (UTC)").fill("2000-01-01T00:00")
    page.get_by_role("button", name="Show the memory then").click()
    ready(page, "version")
    # Then the page shows version 0
    assert "version 0" in page.locator("main").inner_text()
    # And a time from now on shows the head
    page.evaluate("h => { location.hash = h }", "#/timeline")
    ready(page, "timeline")
    page.get_by_label("As of (UTC)").fill("2999-01-01T00:00")
    page.get_by_role("button", name="Show the memory then").click()
    ready(page, "version")
    assert f"version {head(console, rich)['version']}" in page.locator("main").inner_text()


# -- steer ---------------------------------------------------------------------------------------------


def test_an_edit_shows_the_schemas_errors_inline_then_saves(page, console: Console, user: str):
    version = seed.api_edit(console.url, console.token(user), 0, "Ann")
    open_view(page, console, user, "#/edit")
    editor = page.get_by_label("Memory document (JSON)")
    document = json.loads(editor.input_value())
    # When a document the schema refuses is saved
    document["basic_info"]["email"] = "not an email"
    editor.fill(json.dumps(document, indent=2))
    page.get_by_role("button", name="Save").click()
    problems = page.locator("#editor-problems")
    problems.get_by_text("basic_info › email").wait_for()
    # Then the problem is shown beside the editor, and nothing was written
    assert editor.get_attribute("aria-invalid") == "true"
    assert head(console, user)["version"] == version
    # When it is corrected and saved
    document["basic_info"]["email"] = "ann@example.com"
    editor.fill(json.dumps(document, indent=2))
    page.get_by_role("button", name="Save").click()
    ready(page, "edit")
    # Then the page says so beside the Save button, and the API holds it
    beside = page.locator("form.editor .actions")
    expect(beside.get_by_role("status")).to_have_text(f"Saved as version {version + 1}.")
    assert head(console, user)["document"]["basic_info"]["email"] == "ann@example.com"


def test_saving_keeps_the_editors_key_order(page, console: Console, user: str):
    version = seed.api_edit(console.url, console.token(user), 0, "Ann")
    open_view(page, console, user, "#/edit")
    editor = page.get_by_label("Memory document (JSON)")
    # Given a document whose keys the person put in an order of their own (reversed, at each level)
    document = json.loads(editor.input_value())

    def reversed_keys(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: reversed_keys(value[k]) for k in reversed(list(value))}
        return [reversed_keys(v) for v in value] if isinstance(value, list) else value

    mine = reversed_keys({**document, "basic_info": {**document["basic_info"], "email": "ann@example.com"}})
    editor.fill(json.dumps(mine, indent=2))
    # When it is saved
    page.get_by_role("button", name="Save").click()
    ready(page, "edit")
    expect(page.locator("form.editor .actions").get_by_role("status")).to_have_text(f"Saved as version {version + 1}.")
    # Then the editor shows it in that order (the database keeps none), the saved version's content
    shown = page.get_by_label("Memory document (JSON)").input_value()
    assert shown == json.dumps(mine, indent=2)
    assert head(console, user)["document"] == mine


def test_a_stale_edit_is_shown_as_a_conflict(page, console: Console, user: str):
    token = console.token(user)
    version = seed.api_edit(console.url, token, 0, "Ann")
    open_view(page, console, user, "#/edit")
    # Given someone else writes after the page loaded the document
    seed.api_edit(console.url, token, version, "Someone else")
    # When the page saves its edit
    editor = page.get_by_label("Memory document (JSON)")
    editor.fill(editor.input_value().replace('"Ann"', '"Mine"'))
    page.get_by_role("button", name="Save").click()
    # Then it shows a conflict naming the newer version, and nothing of the page's was written
    conflict = page.get_by_role("alert")
    conflict.get_by_text("Conflict: the memory changed meanwhile").wait_for()
    assert f"version {version + 1}" in conflict.inner_text()
    assert head(console, user)["document"]["basic_info"]["name"] == "Someone else"
    # And one click loads the latest version into the editor
    conflict.get_by_role("button", name="Load the latest version").click()
    ready(page, "edit")
    assert "Someone else" in page.get_by_label("Memory document (JSON)").input_value()


def test_prune_a_section(page, console: Console, rich: str, user: str):
    seed.nightly_runs(console.pool, user)
    open_view(page, console, user, "#/edit")
    picker = page.get_by_label("Prune section")
    # Given the picker, which names no section until one is chosen
    assert picker.input_value() == ""
    # When Prune is pressed without a choice, Then nothing is asked and nothing is written
    page.get_by_role("button", name="Prune", exact=True).click()
    assert page.get_by_role("group", name="Confirm").count() == 0 and head(console, user)["version"] == 3
    # When a section is chosen and Prune pressed, Then the page asks first, and Cancel writes nothing
    picker.select_option("current_state")
    page.get_by_role("button", name="Prune", exact=True).click()
    confirm = page.get_by_role("group", name="Confirm")
    assert "Prune current_state?" in confirm.inner_text()
    confirm.get_by_role("button", name="Cancel").click()
    expect(confirm).to_have_count(0)
    assert head(console, user)["version"] == 3
    # And confirming prunes it, said beside the Prune button
    page.get_by_role("button", name="Prune", exact=True).click()
    page.get_by_role("button", name="Yes, prune current_state").click()
    ready(page, "edit")
    expect(page.locator("form.prune").get_by_role("status")).to_have_text("Pruned current_state: version 4.")
    assert head(console, user)["document"]["current_state"]["skills"] == []
    page.evaluate("h => { location.hash = h }", "#/timeline")
    ready(page, "timeline")
    assert "prune" in page.get_by_role("article", name="Version 4").inner_text()


def test_revert_to_a_version(page, console: Console, user: str):
    seed.nightly_runs(console.pool, user)
    open_view(page, console, user, "#/version/1")
    expect(page.locator("#head-line")).to_have_text("The head is version 3.")
    # When Revert is pressed, Then the page asks first, and nothing is written until confirmed
    page.get_by_role("button", name="Revert to version 1").click()
    confirm = page.get_by_role("group", name="Confirm")
    assert "Revert to version 1?" in confirm.inner_text() and head(console, user)["version"] == 3
    confirm.get_by_role("button", name="Yes, revert to version 1").click()
    page.get_by_text("Reverted: version 4 has version 1's document.").wait_for()
    now = head(console, user)
    assert now["version"] == 4 and now["document"]["current_state"]["mood"] == "curious"
    # And the page names the new head: its line and the comparison it offers
    expect(page.locator("#head-line")).to_have_text("The head is version 4.")
    to_head = page.get_by_role("link", name="Compare with the head (v4)")
    assert to_head.get_attribute("href").startswith("#/compare/1/4")
    page.evaluate("h => { location.hash = h }", "#/timeline")
    ready(page, "timeline")
    assert "revert" in page.get_by_role("article", name="Version 4").inner_text()


# -- the other views -----------------------------------------------------------------------------------


def test_key_value_namespaces_and_entries_with_expiry(page, console: Console, rich: str):
    open_view(page, console, rich, "#/kv")
    namespaces = page.get_by_role("table", name="Namespaces").inner_text()
    assert re.search(r"preferences\s+2\s", namespaces) and re.search(r"session\s+1\s", namespaces)
    page.get_by_role("link", name="session").click()
    ready(page, "kv")
    entries = page.get_by_role("table", name="Entries of session").inner_text()
    assert "cart" in entries and '{"items":2}' in entries and "never" not in entries


def test_companion_goals_todos_and_the_week_with_recurrences(page, console: Console, rich: str):
    open_view(page, console, rich, "#/companion")
    assert page.get_by_role("progressbar", name="Read the Rust book").get_attribute("value") == "40"
    assert "File the tax return" in page.locator("ul.todos.overdue").inner_text()
    assert "Call mum" in page.locator("ul.todos:not(.overdue)").inner_text()
    week = page.locator("ol.week")
    # The daily stand-up, expanded once a day this week; the dentist once
    assert week.get_by_text("Team stand-up").count() == 7
    assert week.get_by_text("(repeats)").count() == 7 and week.get_by_text("Dentist").count() == 1
    page.get_by_role("link", name="Next week").click()
    expect(page.locator("#week-title")).not_to_have_text(re.compile("Week of " + today_monday()))
    expect(page.locator("ol.week")).not_to_contain_text("Dentist")
    assert page.locator("ol.week").get_by_text("Team stand-up").count() == 7


def test_conversation_memories(page, console: Console, rich: str):
    open_view(page, console, rich, "#/conversations")
    conversation = page.get_by_role("article", name="Conversation trip-planning").inner_text()
    assert "2 messages" in conversation and "memory through message 2" in conversation
    assert "likes city breaks" in conversation and "dates not chosen" in conversation


def test_search_the_memory(page, console: Console, rich: str):
    open_view(page, console, rich, "#/search")
    page.get_by_label("Search the memory").fill("Rust")
    page.get_by_label("Search the memory").press("Enter")
    page.wait_for_selector("ol.results li")
    results = page.locator("ol.results").inner_text()
    assert "Read the Rust book" in results or "learning Rust" in results


def test_plots_of_size_edits_and_tokens(page, console: Console, rich: str):
    open_view(page, console, rich, "#/plots")
    assert page.get_by_role("img", name=re.compile("Memory size over the last")).count() == 1
    assert page.locator("svg.plot polyline.line").count() == 1
    edits = page.locator("figure", has_text="Edits applied and refused per day")
    edits.get_by_text("Edits applied and refused per day: the numbers").click()
    day = datetime.now(UTC).date().isoformat()
    assert re.search(rf"{day}\s+5\s+1", edits.locator("table").inner_text())  # 2 + 2 + 1 applied, 1 refused
    tokens = page.locator("figure", has_text="LLM tokens per day")
    tokens.get_by_text("LLM tokens per day: the numbers").click()
    assert "6,300" in tokens.locator("table").inner_text()
    # And what they cost, per day
    cost = page.locator("figure", has_text="LLM cost per day")
    cost.get_by_text("LLM cost per day (USD, at the prices of each run): the numbers").click()
    assert "$0.001215" in cost.locator("table").inner_text()  # 360 + 450 + 405 millionths


# -- who sees what -------------------------------------------------------------------------------------


def test_an_operator_looks_up_any_user_and_each_look_is_logged(page, console: Console, rich: str):
    operator = str(uuid.uuid4())
    page.goto(console.signed_in(operator, operator=True))
    ready(page, "memory")
    assert "Operator" in page.locator("#who").inner_text()
    page.get_by_label("User id").fill(rich)
    page.get_by_label("User id").press("Enter")
    page.wait_for_url(re.compile(rich))
    ready(page, "memory", user=rich)
    assert "daily summary 2026-11-21" in page.locator("main").inner_text()
    page.get_by_role("link", name="Key-value").click()
    ready(page, "kv")
    assert "preferences" in page.get_by_role("table", name="Namespaces").inner_text()
    # And each look is logged as an operator action, with who looked and at whom
    logged = [json.loads(line) for line in console.log.read_text().splitlines() if line.startswith("{")]
    looks = [r for r in logged if r.get("message") == "operator action" and r.get("user_id") == rich]
    assert {r["action"] for r in looks} >= {"read memory", "read history", "read kv namespaces"}
    assert {r["operator"] for r in looks} == {operator}


def test_an_end_user_is_refused_another_users_memory(page, console: Console, rich: str, user: str):
    open_view(page, console, user)
    page.evaluate("h => { location.hash = h }", f"#/timeline?u={rich}")
    ready(page, "timeline", user=rich)
    assert "Not allowed (403)" in page.get_by_role("alert").inner_text()
    assert "daily summary" not in page.locator("main").inner_text()
    assert page.locator("#lookup").is_hidden()


def test_sign_in_with_openid_connect_and_pkce(page, oidc_console: OidcConsole, rich: str):
    console = oidc_console
    # Given the issuer will sign in the user
    console.issuer.subject = rich
    issued = console.issuer.tokens_issued
    # When the person opens the console, signs in and approves at the issuer
    page.goto(console.url + "/console")
    page.get_by_role("button", name="Sign in").click()
    page.get_by_role("button", name="Approve").click()
    # Then the console comes back signed in with the issuer's token, and the API accepts it
    ready(page, "memory")
    assert console.issuer.tokens_issued == issued + 1 and console.issuer.refusals == []
    assert f"Signed in as {rich}" in page.locator("#who").inner_text()
    assert "daily summary 2026-11-21" in page.locator("main").inner_text()
    # And the token is in this tab's session storage only: no cookie, nothing left in the URL
    assert page.context.cookies() == []
    assert page.evaluate("sessionStorage.getItem('user-memory.token')").count(".") == 2
    assert "code=" not in page.url and "token=" not in page.url


def _sign_in_at_the_issuer(page: Any, console: OidcConsole, user: str) -> None:
    console.issuer.subject = user
    page.goto(console.url + "/console")
    page.get_by_role("button", name="Sign in").click()
    page.get_by_role("button", name="Approve").click()
    ready(page, "memory")


def test_a_link_carrying_a_token_never_replaces_the_signed_in_session(page, oidc_console: OidcConsole, user: str):
    # Given a person signed in at the issuer, and a token of another user the API would accept
    _sign_in_at_the_issuer(page, oidc_console, user)
    attacker = str(uuid.uuid4())
    lure = oidc_console.issuer.mint(attacker)
    # When a link carrying that token is opened in the same tab (only the fragment changes)
    page.goto(f"{oidc_console.url}/console#token={lure}")
    page.get_by_role("alert").filter(has_text="ignored").wait_for()
    ready(page, "memory")
    # Then the session is still the person's: the page, its token and its writes are theirs
    assert f"Signed in as {user}" in page.locator("#who").inner_text()
    held = page.evaluate("sessionStorage.getItem('user-memory.token')")
    assert held != lure and seed.call(oidc_console.url, "GET", "/me/memory", held)[1]["user_id"] == user
    # And the token left the address (and its history entry)
    assert "token=" not in page.url
    page.go_back()
    assert "token=" not in page.url


def test_the_deployed_console_takes_no_token_from_its_address(page, oidc_console: OidcConsole):
    # Given a console that signs in at an issuer, and a tab holding no session
    lure = oidc_console.issuer.mint(str(uuid.uuid4()))
    # When a link carrying a token the API would accept is opened
    page.goto(f"{oidc_console.url}/console#token={lure}")
    # Then the console does not sign in with it: it says so and offers the issuer's sign-in
    page.get_by_role("button", name="Sign in").wait_for()
    assert "ignored" in page.get_by_role("alert").inner_text()
    assert page.evaluate("sessionStorage.getItem('user-memory.token')") is None
    assert "token=" not in page.url


def test_in_development_a_link_does_not_replace_the_tabs_session(page, console: Console, user: str):
    # Given a tab signed in with a development token
    open_view(page, console, user)
    # When a link signed in as another user is opened in it
    page.goto(console.signed_in(str(uuid.uuid4())))
    page.get_by_role("alert").filter(has_text="ignored").wait_for()
    ready(page, "memory")
    # Then the tab stays signed in as the first user, and the link's token left the address
    assert f"Signed in as {user}" in page.locator("#who").inner_text()
    assert "token=" not in page.url


# -- accessibility and the keyboard, with a screenshot of each view ------------------------------------

VIEWS = [
    "memory",
    "timeline",
    "version/2",
    "compare/1/3",
    "edit",
    "kv/preferences",
    "companion",
    "conversations",
    "search?q=Rust",
    "plots",
    "export",
]


@pytest.mark.parametrize("view", VIEWS)
def test_each_view_has_no_serious_accessibility_violations(
    page, console: Console, rich: str, view: str, shots_dir: Path
):
    page.context.add_init_script(path=str(AXE))
    open_view(page, console, rich)
    page.evaluate("h => { location.hash = h }", f"#/{view}")
    ready(page, view.split("/")[0].split("?")[0])
    if view == "timeline":
        page.get_by_role("article", name="Version 2").get_by_text("Why:").click()
    if view.startswith("search"):
        page.wait_for_selector("ol.results li")
    found = page.evaluate("async () => (await axe.run(document, {resultTypes: ['violations']})).violations")
    serious = [
        (v["id"], v["impact"], [n["target"] for n in v["nodes"]][:3])
        for v in found
        if v["impact"] in ("serious", "critical")
    ]
    assert serious == []
    name = view.replace("/", "-").split("?")[0]
    page.screenshot(path=str(shots_dir / f"{name}.png"), full_page=False)


def test_everything_works_from_the_keyboard(page, console: Console, rich: str):
    open_view(page, console, rich)
    # Tab order: the skip link, sign out, then the views in order
    focused = []
    for _ in range(11):
        page.keyboard.press("Tab")
        focused.append(page.evaluate("document.activeElement.textContent.trim()"))
    assert focused[:11] == [
        "Skip to the view",
        "Sign out",
        "Memory",
        "Timeline",
        "Compare",
        "Edit",
        "Key-value",
        "Companion",
        "Conversations",
        "Search",
        "Plots",
    ]
    # Enter on a focused link opens its view
    for _ in range(6):
        page.keyboard.press("Shift+Tab")
    assert page.evaluate("document.activeElement.textContent.trim()") == "Compare"
    page.keyboard.press("Enter")
    ready(page, "compare")
    # And a version's record opens with the keyboard
    page.evaluate("h => { location.hash = h }", "#/timeline")
    ready(page, "timeline")
    page.get_by_role("article", name="Version 2").get_by_text("Why:").focus()
    page.keyboard.press("Enter")
    assert page.get_by_role("article", name="Version 2").get_by_text("removes a protected fact").is_visible()


def test_a_refused_token_asks_to_sign_in_again(page, console: Console, user: str):
    # Given a console in development, opened with a token the API no longer accepts (expired)
    from user_memory_local.tokens import issue_token

    from tests.browser.conftest import SECRET

    stale = issue_token(user, secret=SECRET, ttl_seconds=1, now=datetime.now(UTC).timestamp() - 30)
    page.goto(f"{console.url}/console#token={stale}")
    # Then the console does not take it, and offers to sign in
    page.get_by_role("heading", name="Sign in").wait_for()  # development: how to get a token
    assert page.evaluate("sessionStorage.getItem('user-memory.token')") is None
    # And a token the API refuses (another secret) is dropped, the refusal shown, with a way back in
    forged = issue_token(user, secret="another-secret-of-at-least-32-bytes!!")
    page.goto(f"{console.url}/console#token={forged}")  # the same page: only the fragment changes
    # (the page reloads itself for the new token: wait for the refusal, not the old page's ready mark)
    page.get_by_role("alert").filter(has_text="Not signed in (401)").wait_for()
    ready(page, "memory")
    assert "Not signed in (401)" in page.get_by_role("alert").inner_text()
    assert page.evaluate("sessionStorage.getItem('user-memory.token')") is None
    page.get_by_role("button", name="Sign in again").click()
    page.get_by_role("heading", name="Sign in").wait_for()  # development: how to get a token


# -- runs (operators) -----------------------------------------------------------------------------------


def test_an_operator_reads_a_run_and_undoes_it_after_confirming(page, console: Console, user: str):
    # Given a run that cleared a user's mood, and another user's run
    from user_memory.domain.memory.document import empty_document

    store = MemoryStore(PostgresRecorder(console.pool))
    run_key = f"daily:{uuid.uuid4().hex[:8]}"
    doc = empty_document("companion")
    doc["current_state"]["mood"] = "curious"
    store.append(user, doc, expected_version=0, source="api")
    damaged = json.loads(json.dumps(doc))
    damaged["current_state"]["mood"] = ""
    provenance = seed.nightly_provenance([("replace", "/current_state/mood", "r")], [], 1500)
    store.append(user, damaged, expected_version=1, source="s", idempotency_key=run_key, provenance=provenance)
    # When an operator opens the runs, then this run
    page.goto(console.signed_in(str(uuid.uuid4()), operator=True))
    ready(page, "memory")
    page.get_by_role("link", name="Runs").click()
    ready(page, "runs")
    page.get_by_role("link", name=run_key).click()
    ready(page, "run")
    # Then its figures show: one user changed, its tokens
    figures = page.locator("dl.figures").inner_text()
    assert "Users changed\n1" in figures and "1,500" in figures
    # When the operator asks to undo it, nothing happens before the confirmation
    page.get_by_role("button", name="Undo this run…").click()
    assert head(console, user)["version"] == 2
    page.get_by_role("button", name="Yes, undo the run").click()
    # Then the report says the user was reverted, and the mood is back
    page.get_by_text("Done: 1 reverted, 0 unchanged, 0 in conflict, 0 failed, 0 pending (of 1).").wait_for()
    now = head(console, user)
    assert now["version"] == 3 and now["document"]["current_state"]["mood"] == "curious"


# -- export, erasure receipts, webhook endpoints (issue 25) ---------------------------------------------


def test_a_user_exports_its_memory_and_gets_a_link_when_it_is_done(page, console: Console, user: str):
    # Given a user with a version
    MemoryStore(PostgresRecorder(console.pool)).append(user, {"summary": "tea"}, expected_version=0, source="api")
    # When it opens the export view and starts an export
    page.goto(console.signed_in(user))
    ready(page, "memory")
    page.get_by_role("link", name="Export").click()
    ready(page, "export")
    page.get_by_role("button", name="Export my memory").click()
    # Then it is done (serve has no queue) and links to the file of JSON Lines
    page.get_by_role("status").filter(has_text="Done: 3 lines").wait_for()
    href = page.get_by_role("link", name="Download the export (JSON Lines)").get_attribute("href")
    assert href is not None and href.endswith(".jsonl")
    lines = Path(href.removeprefix("file://")).read_text().splitlines()
    assert [json.loads(line)["kind"] for line in lines] == ["header", "version", "end"]
    # And an operator's look-up of another user offers no export of that user's memory here
    open_view(page, console, str(uuid.uuid4()), f"#/memory?u={user}", operator=True)
    ready(page, "memory", user=user)
    assert page.get_by_role("link", name="Export").count() == 0


def test_an_operator_lists_the_erasure_receipts_newest_first(page, console: Console, user: str):
    # Given a user with a version, erased by an operator
    from user_memory.adapters.account import PostgresAccount

    MemoryStore(PostgresRecorder(console.pool)).append(user, {"summary": "x"}, expected_version=0, source="api")
    receipt = PostgresAccount(console.pool).erase_with_receipt(uuid.UUID(user), "operator:browser-test")
    # When an operator opens the erasures
    page.goto(console.signed_in(str(uuid.uuid4()), operator=True))
    ready(page, "memory")
    page.get_by_role("link", name="Erasures").click()
    ready(page, "erasures")
    # Then the newest receipt is this one: who asked, what went, the hash and never the id
    first = page.locator("table.grid tbody tr").first
    text = first.inner_text()
    assert "operator:browser-test" in text and "user_memory_snapshots 1" in text and "user_memory_events 1" in text
    assert receipt.user_hash[:16] in text and user not in page.locator("main").inner_text()
    # And an end user (another tab, its own session) has no such view
    tab = page.context.new_page()
    tab.goto(console.signed_in(str(uuid.uuid4())))
    ready(tab, "memory")
    assert tab.get_by_role("link", name="Erasures").count() == 0


def test_an_operator_sees_the_webhook_endpoints_and_disables_and_enables_one(page, console: Console):
    # Given a registered endpoint (as the registry stores it; its secret lives in Secrets Manager)
    endpoint, url = str(uuid.uuid4()), f"https://hooks.example/{uuid.uuid4().hex[:8]}"
    with console.pool.connection() as conn:
        conn.execute(
            "INSERT INTO user_memory_webhooks (id, url, description, secret_name) VALUES (%s, %s, 'crm', 'hook')",
            (endpoint, url),
        )
    try:
        # When an operator opens the webhooks
        page.goto(console.signed_in(str(uuid.uuid4()), operator=True))
        ready(page, "memory")
        page.get_by_role("link", name="Webhooks").click()
        ready(page, "webhooks")
        row = page.get_by_role("row").filter(has_text=url)
        # Then it is listed, enabled
        expect(row).to_contain_text("enabled")
        # When the operator disables it
        page.get_by_role("button", name=f"Disable {url}").click()
        # Then the list says so, and so does the database
        expect(page.get_by_role("row").filter(has_text=url)).to_contain_text("disabled")
        with console.pool.connection() as conn:
            assert conn.execute("SELECT enabled FROM user_memory_webhooks WHERE id = %s", (endpoint,)).fetchone() == (
                False,
            )
        # When it is enabled again, it is enabled
        page.get_by_role("button", name=f"Enable {url}").click()
        expect(page.get_by_role("button", name=f"Disable {url}")).to_be_visible()
    finally:
        with console.pool.connection() as conn:
            conn.execute("DELETE FROM user_memory_webhooks WHERE id = %s", (endpoint,))
