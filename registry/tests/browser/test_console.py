"""The console in a real browser: Debian's Chromium, driven by Playwright,
against the real registry and sidecar on loopback (conftest.py starts them).

Each test saves the page it reaches to target/console-screenshots/NAME.png;
any script error or Content-Security-Policy violation fails it.
"""

from __future__ import annotations

import json
import re
import time
from types import ModuleType
from typing import Any, Callable

import grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from playwright.sync_api import Locator, Page, expect

from conftest import AGENT_KEY, HOSTILE_DESCRIPTION, OPS_KEY, TOOLS, Mesh, bearer, shot, sign_in

POLL_SECONDS = 20.0
"""Longest a test waits for something the registry does in the background."""


def visit(page: Page, path: str) -> None:
    """Opens `path`, which must answer 200 (a missing page fails at once)."""
    answer = page.goto(path)
    assert answer is not None and answer.status == 200, f"GET {path}: {answer.status if answer else 'no answer'}"


def test_refused_without_a_credential(page: Page, mesh: Mesh) -> None:
    page.goto("/tools")
    expect(page).to_have_url(re.compile(r"/login$"))
    expect(page.locator("input#credential")).to_be_visible()

    # A script with a wrong bearer is not served: a page sends it to the
    # sign-in, a form post is refused outright.
    wrong = {"Authorization": "Bearer wrong"}
    got = page.request.get(f"{mesh.console_url}/tools", headers=wrong, max_redirects=0)
    assert got.status == 401 or (got.status in (302, 303, 307) and got.headers["location"] == "/login"), (
        got.status, got.headers)
    posted = page.request.post(f"{mesh.console_url}/logout", headers=wrong, form={"csrf": "x"}, max_redirects=0)
    assert posted.status == 401, posted.status

    page.fill("input#credential", "not-a-key-of-ours")
    with page.expect_response(lambda r: r.url.endswith("/login") and r.request.method == "POST") as answer:
        page.locator("form.login button[type=submit]").click()
    assert answer.value.status == 401
    expect(page.locator("p.error")).to_be_visible()
    expect(page).to_have_url(re.compile(r"/login$"))
    shot(page, "login-refused")


def test_sign_in_catalog_and_sign_out(page: Page) -> None:
    sign_in(page, OPS_KEY)
    expect(page.locator("table.tools tbody tr")).to_have_count(len(TOOLS))
    for name in TOOLS:
        expect(page.locator(f'table.tools a[href="/tools/{name}"]')).to_have_count(1)
    expect(page.locator("header .viewer")).to_contain_text("ops")
    shot(page, "catalog")

    page.locator("header .viewer form button").click()
    expect(page).to_have_url(re.compile(r"/login$"))
    page.goto("/tools")
    expect(page).to_have_url(re.compile(r"/login$"))


def test_search_and_tag_filter(page: Page) -> None:
    sign_in(page, OPS_KEY)
    filters = page.locator("form.filters")
    filters.locator("input[name=q]").fill("reserve a meeting room")
    filters.locator("button[type=submit]").click()
    expect(page).to_have_url(re.compile(r"[?&]q=reserve"))
    expect(page.locator("table.tools tbody tr").first.locator('a[href="/tools/book_room"]')).to_be_visible()
    shot(page, "search")

    filters.locator("input[name=q]").fill("")
    filters.locator("input[name=tag]").fill("billing")
    filters.locator("button[type=submit]").click()
    expect(page).to_have_url(re.compile(r"[?&]tag=billing"))
    rows = page.locator("table.tools tbody tr")
    expect(rows).to_have_count(1)
    expect(rows.first.locator('a[href="/tools/refund"]')).to_be_visible()


def test_tool_page(page: Page) -> None:
    sign_in(page, OPS_KEY)
    page.locator('table.tools a[href="/tools/book_room"]').click()
    expect(page).to_have_url(re.compile(r"/tools/book_room$"))
    expect(page.locator("h1")).to_have_text("Book a meeting room")
    expect(page.locator("p.name code")).to_have_text("book_room")

    schema = page.locator("table.schema").first

    def row(name: str) -> Locator:
        return schema.locator("tbody tr").filter(has=page.locator(f'td > code:text-is("{name}")'))

    expect(row("attendees")).to_contain_text("integer")
    expect(row("attendees")).to_contain_text("≥ 1")
    expect(row("topic")).to_contain_text("yes")  # required
    expect(row("room")).to_contain_text('"atlas", "borealis", "cosmos"')
    expect(row("guests")).to_contain_text("array of string")
    expect(row("organizer")).to_contain_text("object")
    # The organizer's own properties, indented under it.
    expect(schema.locator('td.depth-1 > code:text-is("name")')).to_have_count(1)

    instances = page.locator("table.instances tbody tr")
    expect(instances).to_have_count(1)
    expect(instances.first).to_contain_text("127.0.0.1:")
    shot(page, "tool")


# The playground: each argument in a wrapper marked with its JSON pointer,
# holding a control named `arg:<pointer>`.

def wrapper(page: Page, pointer: str) -> Locator:
    return page.locator(f'form#playground [data-pointer="{pointer}"]:not(.violation)').first


def control(page: Page, pointer: str) -> Locator:
    return wrapper(page, pointer).locator(f'[name="arg:{pointer}"]')


def kind_of(field: Locator) -> str:
    """`select`, `textarea`, or the input's type."""
    return field.first.evaluate("e => e.tagName === 'INPUT' ? (e.type || 'text') : e.tagName.toLowerCase()")


def set_field(page: Page, pointer: str, value: Any) -> None:
    field = control(page, pointer)
    kind = kind_of(field)
    if kind == "checkbox":
        field.set_checked(bool(value))
    elif kind == "radio":
        field.and_(page.locator(f'[value="{json_text(value)}"]')).check()
    elif kind == "select":
        field.select_option(json_text(value))
    elif kind == "textarea" and isinstance(value, list):
        field.fill("\n".join(value))  # an array of scalars: one item a line
    else:
        field.fill(json_text(value))


def field_value(page: Page, pointer: str) -> Any:
    """What the form holds for `pointer`, as set_field would have set it."""
    field = control(page, pointer)
    kind = kind_of(field)
    if kind == "checkbox":
        return field.is_checked()
    if kind == "radio":
        return field.and_(page.locator(":checked")).get_attribute("value")
    return field.input_value()


def json_text(value: Any) -> str:
    return json.dumps(value) if isinstance(value, bool) else str(value)


def invoke(page: Page, outcome: str) -> Locator:
    """Submits the playground and waits for its answer's outcome."""
    # The browser's own checks (min=, required) would stop a bad value
    # before it is sent: the registry's answer is what is tested.
    page.eval_on_selector("form#playground", "form => { form.noValidate = true; }")
    page.locator("button#invoke").click()
    answer = page.locator("section#answer")
    expect(answer).to_have_attribute("data-outcome", outcome)
    return answer


BOOKING = {
    "/topic": "Quarterly planning",
    "/room": "cosmos",
    "/projector": True,
    "/guests": ["Ada Lovelace", "Grace Hopper"],
    "/organizer/name": "Lin",
}


def test_playground_shows_violations_in_place_then_the_result(page: Page) -> None:
    sign_in(page, OPS_KEY)
    visit(page, "/tools/book_room")
    page.locator("a#try").click()
    expect(page).to_have_url(re.compile(r"/tools/book_room/try$"))
    form = page.locator("form#playground")
    expect(form).to_be_visible()
    for pointer in ("/topic", "/attendees", "/room", "/projector", "/guests", "/organizer/name"):
        expect(control(page, pointer)).to_have_count(1)
    expect(control(page, "/guests")).to_have_js_property("tagName", "TEXTAREA")
    expect(form.locator("input[name=idempotency_key]")).to_have_count(1)
    expect(form.locator("details.raw-json textarea[name=raw]")).to_have_count(1)

    for pointer, value in BOOKING.items():
        set_field(page, pointer, value)
    set_field(page, "/attendees", 0)  # below its minimum of 1
    invoke(page, "invalid_argument")
    violation = wrapper(page, "/attendees").locator('.violation[data-pointer="/attendees"]')
    expect(violation).to_be_visible()
    expect(page.locator('.violation:not([data-pointer="/attendees"])')).to_have_count(0)
    # Everything else is as it was typed.
    for pointer, value in BOOKING.items():
        expected = "\n".join(value) if isinstance(value, list) else value
        assert field_value(page, pointer) in (expected, json_text(expected)), (pointer, field_value(page, pointer))
    violation.scroll_into_view_if_needed()
    shot(page, "playground-violation")

    set_field(page, "/attendees", 6)
    page.locator("form#playground input[name=idempotency_key]").fill("planning-q3")
    invoke(page, "ok")
    result = page.locator("pre#result")
    expect(result).to_be_visible()
    assert json.loads(result.inner_text()) == {
        "booked": "cosmos",
        "topic": "Quarterly planning",
        "seats": 6,
        "projector": True,
        "guests": ["Ada Lovelace", "Grace Hopper"],
        "organizer": "Lin",
    }
    expect(page.locator(".violation")).to_have_count(0)
    result.scroll_into_view_if_needed()
    shot(page, "playground-result")

    # The tool page now draws its last minutes: one call refused, one ok.
    visit(page, "/tools/book_room")
    charts = page.locator("div.charts")
    expect(charts.locator("svg")).to_have_count(3)
    expect(charts).to_contain_text("ok 1")
    expect(charts).to_contain_text("refused 1")
    expect(page.locator("dl.rate-limit")).to_be_visible()
    page.locator("h2", has_text="Last ten minutes").scroll_into_view_if_needed()
    shot(page, "tool-charts")


def test_playground_tool_error_and_rate_limit(page: Page) -> None:
    sign_in(page, OPS_KEY)
    visit(page, "/tools/always_fails/try")
    answer = invoke(page, "tool_error")
    expect(answer).to_contain_text("the backend is down")

    visit(page, "/tools/limited/try")
    invoke(page, "ok")
    answer = invoke(page, "resource_exhausted")  # its one call per 100 s is spent
    expect(answer.locator(".retry-after")).to_be_visible()
    answer.scroll_into_view_if_needed()
    shot(page, "playground-rate-limited")


def error_info(err: grpc.RpcError) -> error_details_pb2.ErrorInfo:
    status = rpc_status.from_call(err)
    assert status is not None, f"no details in {err}"
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            return info
    raise AssertionError(f"no ErrorInfo in {status}")


def wait_for_task(pb: ModuleType, mesh: Mesh, task_id: str, key: str) -> Any:
    """The task once it is over, read by its caller."""
    tasks = pb.grpc.TasksStub(mesh.channel)
    deadline = time.monotonic() + POLL_SECONDS
    while True:
        task = tasks.GetTask(pb.GetTaskRequest(id=task_id), metadata=bearer(key), timeout=10)
        if task.state not in (pb.TASK_STATE_WORKING, pb.TASK_STATE_INPUT_REQUIRED):
            return task
        assert time.monotonic() < deadline, f"task {task_id} still {pb.TaskState.Name(task.state)}"
        time.sleep(0.2)


def test_approvals(open_page: Callable[[], Page], mesh: Mesh, pb: ModuleType) -> None:
    registry = pb.grpc.ToolRegistryStub(mesh.channel)
    try:
        registry.Invoke(pb.InvokeRequest(tool="refund", arguments_json='{"amount": 500}'),
                        metadata=bearer(AGENT_KEY), timeout=20)
        raise AssertionError("the refund ran without an approval")
    except grpc.RpcError as err:
        assert err.code() == grpc.StatusCode.FAILED_PRECONDITION, err
        info = error_info(err)
    assert info.reason == "APPROVAL_REQUIRED", info
    task_id = info.metadata["task_id"]

    # The agent's console role is view only: it may not decide.
    agent = open_page()
    sign_in(agent, AGENT_KEY)
    seen = agent.goto("/approvals")
    assert seen is not None
    if seen.status != 403:
        assert seen.status == 200, f"/approvals answered {seen.status}"
        expect(agent.locator("form.decide")).to_have_count(0)
        expect(agent.locator("button[name=decision]")).to_have_count(0)

    page = open_page()
    sign_in(page, OPS_KEY)
    visit(page, "/approvals")
    row = page.locator(f'table.approvals tbody tr[data-task="{task_id}"]')
    expect(row).to_be_visible()
    expect(row).to_contain_text("refund")
    expect(row).to_contain_text("agent")
    shot(page, "approvals")

    decide = row.locator("form.decide")
    expect(decide.locator("button[name=decision][value=deny]")).to_be_visible()
    decide.locator("textarea[name=comment]").fill("Checked with the customer")
    decide.locator("button[name=decision][value=approve]").click()
    expect(page.locator("p.notice")).to_be_visible()
    shot(page, "approvals-decided")

    task = wait_for_task(pb, mesh, task_id, AGENT_KEY)
    assert task.state == pb.TASK_STATE_COMPLETED, task
    assert json.loads(task.response.result_json) == {"refunded": 500}


def call_rows(page: Page) -> list[tuple[str, str, str]]:
    return [tuple(r) for r in page.eval_on_selector_all(
        "table.calls tbody tr",
        """rows => rows.map(r => ["tool", "caller", "outcome"].map(
               c => (r.querySelector("td." + c)?.innerText ?? "").trim()))""",
    )]


def reload_until(page: Page, url: str, done: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + POLL_SECONDS
    while True:
        visit(page, url)
        if done():
            return
        assert time.monotonic() < deadline, f"{what} not shown at {url} in {POLL_SECONDS}s"
        time.sleep(0.5)


def test_calls_and_tasks(page: Page, mesh: Mesh, pb: ModuleType) -> None:
    registry = pb.grpc.ToolRegistryStub(mesh.channel)
    done = registry.Invoke(pb.InvokeRequest(tool="word_count", arguments_json='{"text": "one two three"}'),
                           metadata=bearer(OPS_KEY), timeout=20)
    assert json.loads(done.result_json) == {"words": 3}
    started = pb.grpc.TasksStub(mesh.channel).StartTask(
        pb.StartTaskRequest(call=pb.InvokeRequest(tool="word_count", arguments_json='{"text": "a task"}')),
        metadata=bearer(OPS_KEY), timeout=20)
    assert wait_for_task(pb, mesh, started.id, OPS_KEY).state == pb.TASK_STATE_COMPLETED

    sign_in(page, OPS_KEY)
    reload_until(page, "/calls", lambda: ("word_count", "ops", "ok") in call_rows(page), "the word_count call")
    task_row = page.locator(f'table.tasks tbody tr[data-task="{started.id}"]')
    expect(task_row.locator("td.state")).to_have_text(re.compile("completed", re.IGNORECASE))
    shot(page, "calls")

    page.locator("input[name=tool]").fill("word_count")
    page.locator("input[name=tool]").press("Enter")
    expect(page).to_have_url(re.compile(r"[?&]tool=word_count"))
    rows = call_rows(page)
    assert rows and all(tool == "word_count" for tool, _, _ in rows), rows


def test_hostile_description_is_text(page: Page) -> None:
    sign_in(page, OPS_KEY)
    row = page.locator("table.tools tbody tr").filter(has=page.locator('a[href="/tools/xss_probe"]'))
    expect(row.locator("td.description")).to_have_text(HOSTILE_DESCRIPTION)

    page.locator('a[href="/tools/xss_probe"]').click()
    expect(page.locator("p.description")).to_have_text(HOSTILE_DESCRIPTION)
    expect(page.locator("main script, main img")).to_have_count(0)
    assert page.evaluate("window.pwned") is None
    shot(page, "hostile")

    visit(page, "/tools/xss_probe/try")
    expect(page.locator("main script, main img")).to_have_count(0)
    assert page.evaluate("window.pwned") is None
