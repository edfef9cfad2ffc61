//! The promises every [`Gateway`] keeps, as one suite any implementation
//! runs (like openraft's storage suite): seatfence's money safety leans on
//! them (an idempotent create, a capture at most once and fenced, a void
//! that wins or reports the capture, refunds once per key). Run against the
//! mock gateway through [`super::client::HttpGateway`]
//! (`testkit/tests/mock_gateway.rs`), it checks the mock and the client
//! together; a new provider's client runs it against the provider's sandbox.

use futures::future::BoxFuture;
use seatfence_core::{Epoch, Fence};

use super::{CreatePayment, CreatedPayment, Gateway, GatewayError, PaymentStatus};

/// The buyer's approval of one payment, as `run`'s caller performs it.
pub type Approval = BoxFuture<'static, Result<(), String>>;

/// A fence at `term` of epoch 1.
fn fence(term: u64) -> Fence {
    Fence {
        epoch: Epoch(1),
        term,
    }
}

/// A payment request under idempotency key `key`.
fn request(key: &str) -> CreatePayment {
    CreatePayment {
        amount_cents: 500,
        currency: "EUR".into(),
        invoice: format!("conformance-{key}"),
        idempotency_key: key.into(),
        return_url: "http://edge.invalid/v1/payments/callback".into(),
        // Nobody listens: webhook delivery fails and is retried, unseen.
        webhook_url: "http://127.0.0.1:9/hook".into(),
    }
}

/// Run every promise against `gw`. `approve` plays the buyer approving a
/// payment at the provider (outside the trait: the buyer's browser does
/// it). `prefix` keeps this run's idempotency keys apart from any other's
/// on the same provider. The first broken promise is the error.
pub async fn run<F>(gw: &dyn Gateway, approve: F, prefix: &str) -> Result<(), String>
where
    F: Fn(CreatedPayment) -> Approval,
{
    let key = |k: &str| format!("{prefix}-{k}");
    let (a, other) = create_and_capture(gw, &approve, prefix).await?;
    void_or_captured(gw, &approve, &a, &other).await?;
    refunds(gw, &a, &key("r1")).await
}

/// A failed call, named.
fn fail(what: &str, e: GatewayError) -> String {
    format!("{what}: {e:?}")
}

/// Create is idempotent by key; nothing is captured before approval; a
/// capture happens once, fenced. The captured payment and another one
/// (created, not approved).
async fn create_and_capture<F>(
    gw: &dyn Gateway,
    approve: &F,
    prefix: &str,
) -> Result<(CreatedPayment, CreatedPayment), String>
where
    F: Fn(CreatedPayment) -> Approval,
{
    let key = |k: &str| format!("{prefix}-{k}");
    // Create is idempotent by key.
    let a = gw
        .create(request(&key("a")))
        .await
        .map_err(|e| fail("create", e))?;
    let again = gw
        .create(request(&key("a")))
        .await
        .map_err(|e| fail("create again", e))?;
    check(
        a == again,
        "a create repeated under its key answers the same payment",
    )?;
    let other = gw
        .create(request(&key("b")))
        .await
        .map_err(|e| fail("create b", e))?;
    check(
        other.payment_id != a.payment_id,
        "another key creates another payment",
    )?;

    // Nothing is captured before the buyer approves.
    let early = gw.execute(&a.payment_id, fence(5)).await;
    check(
        matches!(early, Err(GatewayError::Rejected { .. })),
        "an execute before approval is rejected",
    )?;
    let st = gw
        .query(&a.payment_id)
        .await
        .map_err(|e| fail("query", e))?;
    check(
        st.status == PaymentStatus::Created,
        "a fresh payment is `created`",
    )?;
    check(
        st.invoice.as_deref() == Some(a_invoice(prefix).as_str()),
        "query names the invoice",
    )?;

    // Captured once, fenced: a repeat answers the same, an older fence is refused.
    approve(a.clone()).await?;
    let first = gw
        .execute(&a.payment_id, fence(5))
        .await
        .map_err(|e| fail("execute", e))?;
    check(
        first.status == PaymentStatus::Completed,
        "an approved payment is captured",
    )?;
    check(first.txn_id.is_some(), "a capture carries a transaction id")?;
    let repeat = gw
        .execute(&a.payment_id, fence(5))
        .await
        .map_err(|e| fail("execute again", e))?;
    check(
        repeat == first,
        "a repeated execute answers the same capture",
    )?;
    let stale = gw.execute(&a.payment_id, fence(4)).await;
    check(
        stale == Err(GatewayError::StaleFence),
        "an older fence is refused",
    )?;
    let st = gw
        .query(&a.payment_id)
        .await
        .map_err(|e| fail("query", e))?;
    check(st.txn_id == first.txn_id, "query reports the capture")?;
    Ok((a, other))
}

/// A void after the capture of `a` reports it; a void of `other` before
/// its capture wins for good.
async fn void_or_captured<F>(
    gw: &dyn Gateway,
    approve: &F,
    a: &CreatedPayment,
    other: &CreatedPayment,
) -> Result<(), String>
where
    F: Fn(CreatedPayment) -> Approval,
{
    // A void after the capture reports it; it never undoes money taken.
    let late = gw.void(&a.payment_id, fence(6)).await;
    check(
        late == Err(GatewayError::AlreadyCaptured),
        "a void after the capture answers `already_captured`",
    )?;

    // A void first wins: the payment can never be captured after it.
    approve(other.clone()).await?;
    let voided = gw
        .void(&other.payment_id, fence(5))
        .await
        .map_err(|e| fail("void", e))?;
    check(
        voided.status.is_dead(),
        "a void before the capture ends the payment",
    )?;
    let again = gw
        .void(&other.payment_id, fence(5))
        .await
        .map_err(|e| fail("void again", e))?;
    check(
        again.status == voided.status,
        "a repeated void answers the same",
    )?;
    let after = gw.execute(&other.payment_id, fence(6)).await;
    check(
        !matches!(after, Ok(ref s) if s.status == PaymentStatus::Completed),
        "a voided payment is never captured",
    )?;
    Ok(())
}

/// Refunds of the captured `a`: fenced, once per `key`.
async fn refunds(gw: &dyn Gateway, a: &CreatedPayment, key: &str) -> Result<(), String> {
    let stale = gw.refund(&a.payment_id, key, fence(4)).await;
    check(stale.is_err(), "a refund under an older fence is refused")?;
    let r1 = gw
        .refund(&a.payment_id, key, fence(6))
        .await
        .map_err(|e| fail("refund", e))?;
    let r1_again = gw
        .refund(&a.payment_id, key, fence(6))
        .await
        .map_err(|e| fail("refund again", e))?;
    check(
        r1 == r1_again,
        "a refund repeated under its key answers the same refund",
    )?;
    Ok(())
}

/// The invoice `run` gives its first payment.
fn a_invoice(prefix: &str) -> String {
    format!("conformance-{prefix}-a")
}

fn check(ok: bool, promise: &str) -> Result<(), String> {
    if ok {
        Ok(())
    } else {
        Err(format!("broken promise: {promise}"))
    }
}
