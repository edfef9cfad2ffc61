//! Which event group a request was about, so the edge can name that
//! group's leader's edge in its answer (`X-Seatfence-Leader-Edge`,
//! docs/DESIGN.md §7): [`Commands`](crate::commands::Commands) marks each
//! group it resolves or runs a command on; the edge reads the mark after
//! the handler. Outside [`scope`] marks are dropped.

use std::cell::Cell;
use std::future::Future;

use seatfence_core::GroupId;

tokio::task_local! {
    static TOUCHED: Cell<Option<GroupId>>;
}

/// Run `f`, answering its output and the last event group it touched.
pub async fn scope<F: Future>(f: F) -> (F::Output, Option<GroupId>) {
    TOUCHED
        .scope(Cell::new(None), async move {
            let out = f.await;
            (out, TOUCHED.with(Cell::get))
        })
        .await
}

/// The request under way is about `group` (the directory is not an event
/// group: ignored).
pub fn touch(group: GroupId) {
    if !group.is_directory() {
        let _ = TOUCHED.try_with(|t| t.set(Some(group)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_last_event_group_touched_inside_the_scope() {
        touch(GroupId(7)); // outside any scope: dropped
        let ((), g) = scope(async {
            touch(GroupId(3));
            tokio::task::yield_now().await;
            touch(GroupId::DIRECTORY);
            touch(GroupId(5));
        })
        .await;
        assert_eq!(g, Some(GroupId(5)));
        assert_eq!(scope(async {}).await.1, None);
    }
}
