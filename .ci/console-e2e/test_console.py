"""The operator console in a real browser (headless Chromium, Playwright).

Against a running demo (3 regions x 3 nodes, `demo-concert`): sign in with
the link `seatfence ctl console` prints, see three regions and nine nodes,
find the event's owner, move it to another region from the console and
watch the move reach `done`, then check through the HTTP API that the
owner and epoch changed and that the audit trail names the move; a buyer's
token is refused ("Operators only"). A screenshot of each page goes to the
output directory.

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
