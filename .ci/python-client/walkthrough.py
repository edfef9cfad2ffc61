"""README's buyer walk-through through the Python client generated from
docs/openapi.json (openapi-python-client): every call to seatfence goes
through the generated, typed API functions, and every answer is parsed
into the document's models, error bodies included. Only the mock
gateway's page (not seatfence's API) is called with httpx directly.

    python walkthrough.py DEMO_JSON
"""

import json
import sys
import urllib.parse

import httpx
from seatfence_api_client import AuthenticatedClient, Client
from seatfence_api_client.api.default import (
    availability,
    cancel_hold,
    create_booking,
    create_hold,
    get_booking,
    get_event,
    get_hold,
    payment_callback,
)
from seatfence_api_client.models import Availability, Booking, BookingRequest, Error, Event, Hold


def step(what):
    print(f"python-client: {what}", flush=True)


def expect(resp, status, model):
    """The answer has `status` and parsed into `model`."""
    assert resp.status_code == status, f"{resp.status_code} {resp.content!r}"
    assert isinstance(resp.parsed, model), f"{type(resp.parsed)}: {resp.content!r}"
    return resp.parsed


def main(path):
    demo = json.load(open(path))
    us, eu, ap = demo["edges"]["us-east"], demo["edges"]["eu-west"], demo["edges"]["ap-south"]
    alice, bob = demo["tokens"]["alice"], demo["tokens"]["bob"]
    event_id = "demo-concert"

    def as_user(url, token):
        return AuthenticatedClient(base_url=url, token=token, raise_on_unexpected_status=True)

    step("the event, asked of the Europe edge")
    ev = expect(get_event.sync_detailed(event_id, client=as_user(eu, alice)), 200, Event)
    assert ev.event_id == event_id and ev.owner_region == "us-east", ev
    step(f"  owner {ev.owner_region}, epoch {ev.epoch}, capacity {ev.capacity}")

    step("alice holds A-1-1 and A-1-2 under a key; the same call again is the same hold")
    body = {"event_id": event_id, "seats": ["A-1-1", "A-1-2"]}
    r1 = create_hold.sync_detailed(client=as_user(eu, alice), body=body, idempotency_key="py-alice-1")
    h1 = expect(r1, 201, Hold)
    r2 = create_hold.sync_detailed(client=as_user(eu, alice), body=body, idempotency_key="py-alice-1")
    h2 = expect(r2, 201, Hold)
    assert h1.hold_id == h2.hold_id, (h1.hold_id, h2.hold_id)
    assert r2.headers.get("idempotent-replayed") == "true", r2.headers
    step(f"  {h1.hold_id}: {h1.seats}, replayed: {r2.headers.get('idempotent-replayed')}")

    step("bob wants A-1-2: 409 seats_unavailable, a typed error")
    r = create_hold.sync_detailed(client=as_user(ap, bob), body={"event_id": event_id, "seats": ["A-1-2"]})
    err = expect(r, 409, Error)
    assert err.error.code == "seats_unavailable", err
    assert err.error.unavailable == ["A-1-2"], err.to_dict()
    step(f"  {err.error.code}: {err.error.message}")

    step("bob holds any 3 seats of section B")
    hb = expect(
        create_hold.sync_detailed(
            client=as_user(ap, bob), body={"event_id": event_id, "section": "B", "quantity": 3}
        ),
        201,
        Hold,
    )
    assert len(hb.seats) == 3, hb

    step("availability, the first 5 free seats")
    av = expect(availability.sync_detailed(event_id, client=as_user(us, bob), limit=5), 200, Availability)
    assert len(av.available_seats) <= 5 and av.held >= 5, av.to_dict()
    step(f"  available {av.available}, held {av.held}, sold {av.sold}, stale {av.stale_ms} ms")

    step("alice reads her hold; bob gets 404 for it")
    mine = expect(get_hold.sync_detailed(h1.hold_id, client=as_user(us, alice)), 200, Hold)
    assert mine.hold_id == h1.hold_id
    nope = expect(get_hold.sync_detailed(h1.hold_id, client=as_user(us, bob)), 404, Error)
    assert nope.error.code == "hold_not_found", nope

    step("bob cancels his")
    gone = expect(cancel_hold.sync_detailed(hb.hold_id, client=as_user(us, bob)), 200, Hold)
    assert str(gone.status) == "released", gone.to_dict()

    step("alice books her hold: pending, with the gateway's page")
    bk = expect(
        create_booking.sync_detailed(client=as_user(us, alice), body=BookingRequest(hold_id=h1.hold_id)),
        201,
        Booking,
    )
    assert str(bk.status) == "pending", bk.to_dict()

    step("she approves at the gateway; its redirect brings her browser to the callback")
    page = httpx.post(bk.approve_url, json={}, timeout=30)
    page.raise_for_status()
    redirect = urllib.parse.urlsplit(page.json()["redirect"])
    q = dict(urllib.parse.parse_qsl(redirect.query))
    edge = f"{redirect.scheme}://{redirect.netloc}"
    cb = payment_callback.sync_detailed(
        client=Client(base_url=edge, raise_on_unexpected_status=True),
        booking=q["booking"],
        payment_id=q["paymentID"],
        status=q.get("status"),
        signature=q["signature"],
    )
    assert cb.status_code == 200, cb.content
    assert cb.parsed.status == "confirmed", cb.content
    step(f"  callback: {cb.parsed.booking_id} {cb.parsed.status}")

    step("the booking, read back")
    done = expect(get_booking.sync_detailed(bk.booking_id, client=as_user(us, alice)), 200, Booking)
    assert str(done.status) == "confirmed", done.to_dict()
    step(f"ok: {done.booking_id} confirmed through the generated client")


if __name__ == "__main__":
    main(sys.argv[1])
