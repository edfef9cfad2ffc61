//! openraft's storage conformance suite against the sled log store and
//! state machine, in both flush modes.

use openraft::testing::log::{StoreBuilder, Suite};
use openraft::StorageError;
use seatfence_core::GroupId;
use seatfence_raft::storage::{FlushMode, LogStore, NodeDb, StateMachineStore};
use seatfence_raft::types::TypeConfig;

struct SledBuilder(FlushMode);

impl StoreBuilder<TypeConfig, LogStore, StateMachineStore, tempfile::TempDir> for SledBuilder {
    async fn build(
        &self,
    ) -> Result<(tempfile::TempDir, LogStore, StateMachineStore), StorageError<TypeConfig>> {
        let dir = tempfile::tempdir().expect("temp dir");
        let db = NodeDb::open(dir.path(), self.0).expect("open sled");
        let log = LogStore::open(&db, GroupId(1)).expect("open log");
        let sm = StateMachineStore::open(&db, GroupId(1)).expect("open sm");
        Ok((dir, log, sm))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sled_store_passes_openraft_suite_inline_flush() {
    Suite::test_all(SledBuilder(FlushMode::Inline))
        .await
        .expect("suite");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sled_store_passes_openraft_suite_shared_flush() {
    Suite::test_all(SledBuilder(FlushMode::Shared))
        .await
        .expect("suite");
}
