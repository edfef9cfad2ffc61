"""The operator console in a real browser (headless Chromium, Playwright).

Against a running demo (3 regions x 3 nodes, `demo-concert`): sign in with
the link `seatfence ctl console` prints, see three regions and nine nodes,
find the event's owner; open the console on the edge of another region
with a link that names a page (`#/events&token=...`) and see the fleet's
metrics there ("9 of 9 nodes reporting", a non-zero holds rate for holds
made through the owner's edge); move the event to another region from the
console and watch the move reach `done` (step times to the millisecond,
no abort button once done), then check through the HTTP API that the
owner and epoch changed and that the audit trail names the move; at
1024x768 no page scrolls sideways; a buyer's token is refused ("Operators
only"). A screenshot of each page goes to the output directory.

    python test_console.py DEMO_JSON OUT_DIR SEATFENCE_BINARY
"""

import json
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from playwright.sync_api import expect, sync_playwright

EVENT = "demo-concert"
CHROMIUM = "/usr/bin/chromium"
# Generous bounds against hangs only: a move pauses writes for well under
# a second, but a slow VM may take tens of seconds to catch learners up.
MOVE_DONE_MS = 90_000
PAGE_MS = 20_000
# The fleet view needs the edge's fan-out to every node and two samples
# for a rate; it shows within seconds, this bounds a hang.
FLEET_MS = 60_000
# Each page's content marker, for the tour at 1024 px.
PAGES = {
    "cluster": "[data-region]",
    "events": "tr[data-event]",
    "moves": "tr[data-move]",
    "nodes": "tr[data-node]",
    "audit": "tr[data-seq]",
    "alerts": "li[data-alert]",
}


def api(method: str, url: str, token: str, body: dict | None = None) -> dict:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    req.add_header("Authorization", f"Bearer {token}")
    if data is not None:
        req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.load(r)


def shot(page, out: Path, name: str) -> None:
    page.screenshot(path=str(out / f"{name}.png"))
    print(f"  screenshot {out / (name + '.png')}")


def watch_errors(page, errors: list[str]) -> None:
    """Collect the page's script errors, console errors and 4xx/5xx answers."""
    page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
    page.on(
        "console",
        lambda m: errors.append(f"console {m.type}: {m.text}")
        if m.type == "error"
        else None,
    )
    page.on(
        "response",
        lambda r: errors.append(f"{r.status} {r.request.method} {r.url}")
        if r.status >= 400
        else None,
    )


def no_sideways_scroll(page, name: str) -> None:
    """Neither the page nor any table box scrolls horizontally."""
    doc, inner = page.evaluate(
        "[document.documentElement.scrollWidth, window.innerWidth]"
    )
    assert doc <= inner, f"{name}: the page scrolls sideways ({doc} > {inner} px)"
    boxes = page.evaluate(
        """Array.from(document.querySelectorAll('.scroll-x'))
            .filter((e) => e.scrollWidth > e.clientWidth + 1)
            .map((e) => `${e.id || e.firstElementChild?.className || e.className}: ${e.scrollWidth} > ${e.clientWidth}`)"""
    )
    assert not boxes, f"{name}: a table scrolls sideways: {boxes}"


def number(text: str | None) -> float:
    """A figure as the console shows it ("0.25", "1,234", "–" for none)."""
    try:
        return float((text or "").replace(",", ""))
    except ValueError:
        return 0.0


def main() -> int:
    demo_path, out, binary = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    out.mkdir(parents=True, exist_ok=True)
    demo = json.loads(demo_path.read_text())
    operator, buyer = demo["tokens"]["operator"], demo["tokens"]["alice"]
    link = subprocess.check_output(
        [binary, "ctl", "--demo", str(demo_path), "console"], text=True
    ).strip()
    edge = link.split("/console#token=")[0]
    before = api("GET", f"{edge}/v1/events/{EVENT}", operator)
    owner = before["owner_region"]
    target = next(r for r in sorted(demo["edges"]) if r != owner)
    print(f"{EVENT}: owner {owner}, epoch {before['epoch']}; moving it to {target}")
    # Something to see on the events page: a buyer holds three seats.
    api("POST", f"{edge}/v1/holds", buyer, {"event_id": EVENT, "quantity": 3})

    started = time.monotonic()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM)
        ctx = browser.new_context(viewport={"width": 1280, "height": 800})
        ctx.set_default_timeout(PAGE_MS)
        page = ctx.new_page()
        errors: list[str] = []
        watch_errors(page, errors)

        print("sign in with the link; the cluster page")
        page.goto(link)
        expect(page.locator("[data-region]")).to_have_count(3)
        expect(page.locator("[data-region] tr[data-node]")).to_have_count(9)
        assert "token=" not in page.url, f"the token stayed in the address bar: {page.url}"
        expect(page.locator("#who")).to_contain_text("operator")
        shot(page, out, "cluster")

        print("events: the owner")
        page.click("#nav-events")
        row = page.locator(f'tr[data-event="{EVENT}"]')
        expect(row.locator(".owner")).to_contain_text(owner)
        expect(row).not_to_contain_text("not polled")
        expect(row.get_by_text(re.compile(r"^(open|closed)$"))).to_be_visible()
        # Holds made while the page watches show as a rate at the leader.
        for _ in range(4):
            api("POST", f"{edge}/v1/holds", buyer, {"event_id": EVENT, "quantity": 1})
            page.wait_for_timeout(1_000)
        expect(row.locator("td.rate-holds")).to_have_text(re.compile(r"^(?!0\.0$)\d+\.\d$"))
        shot(page, out, "events")

        # The fleet view: the console opened on the edge of a region that
        # holds no replica of the event (zone survival: its three voters
        # are in the owner's region), with a link naming the page. Holds
        # go through the owner's edge, so only the fleet's metrics can show
        # them on this one.
        regions = sorted(demo["edges"])
        fleet_region = "ap-south" if "ap-south" in regions and owner != "ap-south" else next(
            r for r in regions if r != owner
        )
        cluster = api("GET", f"{edge}/v1/admin/cluster", operator)
        group = next(g for g in cluster["groups"] if g["event_id"] == EVENT)
        leader_region = next(
            n["region"] for n in cluster["nodes"] if n["node_id"] == group["leader"]
        )
        assert leader_region != fleet_region, f"{EVENT}'s leader is in {fleet_region}"
        print(f"fleet: the console on the {fleet_region} edge, holds through {owner}'s")
        fleet_page = ctx.new_page()
        watch_errors(fleet_page, errors)
        fleet_page.goto(f"{demo['edges'][fleet_region]}/console#/events&token={operator}")
        expect(fleet_page.locator("#nav-events")).to_have_attribute("aria-current", "page")
        assert fleet_page.url.endswith("#/events"), f"the link's route was lost: {fleet_page.url}"
        expect(fleet_page.locator("#fleet")).to_contain_text(
            "9 of 9 nodes reporting", timeout=FLEET_MS
        )
        expect(fleet_page.locator("#totals-scope")).to_contain_text("whole fleet")
        deadline = time.monotonic() + FLEET_MS / 1000
        rate = 0.0
        while rate <= 0 and time.monotonic() < deadline:
            api("POST", f"{demo['edges'][owner]}/v1/holds", buyer, {"event_id": EVENT, "quantity": 1})
            fleet_page.wait_for_timeout(1_500)
            rate = number(fleet_page.locator("#holds-rate").text_content())
        assert rate > 0, "the fleet's holds rate stayed 0 on the " + fleet_region + " edge"
        assert number(fleet_page.locator("#holds-total").text_content()) > 0
        print(f"  holds/s across the fleet: {rate}")
        shot(fleet_page, out, "fleet-events")
        fleet_page.click("#nav-alerts")
        fleet = fleet_page.locator('li[data-alert="fleet"]')
        expect(fleet).to_contain_text("9 of 9 nodes reporting")
        expect(fleet).to_have_attribute("data-level", "ok")
        fleet_page.close()

        print("moves: start one, confirm, watch it reach done")
        page.click("#nav-moves")
        page.fill("#move-event", EVENT)
        page.fill("#move-target", target)
        page.click("#move-start")
        expect(page.locator("#confirm-dialog")).to_be_visible()
        expect(page.locator("#confirm-body")).to_contain_text(target)
        page.click("#confirm")
        expect(page.locator("#move-answer")).to_contain_text("202")
        done = page.locator(f'tr[data-move] td.state[data-state="done"]')
        expect(done).to_have_count(1, timeout=MOVE_DONE_MS)
        shot(page, out, "moves")

        print("moves: the finished move, step by step to the millisecond")
        page.locator('tr[data-move]:has(td.state[data-state="done"])').get_by_role(
            "link", name="Watch"
        ).click()
        # "entered 12:00:01.234 (+68 ms)": the clock to the ms, the offset from the start.
        expect(page.locator('#move-watch li.step[data-step="done"] .step-at')).to_contain_text(
            re.compile(r"\d\d:\d\d:\d\d\.\d{3} \(\+[\d,.]+ (ms|s|min)")
        )
        expect(page.locator("#move-abort")).to_be_hidden()
        shot(page, out, "move-done")

        print("nodes, audit, alerts")
        page.click("#nav-nodes")
        expect(page.locator("tr[data-node]")).to_have_count(9)
        shot(page, out, "nodes")
        page.click("#nav-audit")
        expect(page.locator("tr[data-seq]").first).to_be_visible()
        expect(page.locator("#view")).to_contain_text(f"event {EVENT} to {target}")
        shot(page, out, "audit")
        page.click("#nav-alerts")
        expect(page.locator("li[data-alert]").first).to_be_visible()
        shot(page, out, "alerts")

        print("every page at 1024x768: nothing scrolls sideways")
        page.set_viewport_size({"width": 1024, "height": 768})
        for name, marker in PAGES.items():
            page.click(f"#nav-{name}")
            expect(page.locator(marker).first).to_be_visible()
            # One refresh round at the new width (charts are drawn to fit it).
            page.wait_for_timeout(2_500)
            no_sideways_scroll(page, name)
            shot(page, out, f"{name}-1024")

        print("a buyer's token: operators only")
        buyer_page = browser.new_context(viewport={"width": 1280, "height": 800}).new_page()
        buyer_page.goto(f"{edge}/console#token={buyer}")
        expect(buyer_page.locator("#forbidden")).to_be_visible(timeout=PAGE_MS)
        expect(buyer_page.locator("#forbidden")).to_contain_text("Operators only")
        expect(buyer_page.locator("#view")).to_be_hidden()
        shot(buyer_page, out, "forbidden")
        browser.close()

    after = api("GET", f"{edge}/v1/events/{EVENT}", operator)
    assert after["owner_region"] == target, f"owner after the move: {after}"
    assert after["epoch"] > before["epoch"], f"epoch did not rise: {before} -> {after}"
    audit = api("GET", f"{edge}/v1/admin/audit?limit=100", operator)["entries"]
    moves = [
        e
        for e in audit
        if e["action"] == "move" and e["actor"] == "console" and EVENT in e["target"]
    ]
    assert moves, f"no move by `console` in the audit trail: {audit[:5]}"
    assert not errors, "the page logged errors:\n" + "\n".join(errors)
    print(
        f"ok: {EVENT} moved {owner} -> {target}, epoch {before['epoch']} -> "
        f"{after['epoch']}, audited as {moves[0]['action']!r} by {moves[0]['actor']!r}; "
        f"browser part {time.monotonic() - started:.1f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
