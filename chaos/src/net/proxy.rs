//! The userspace proxy mechanism: [`LinkNet`] (testkit's link proxies, a
//! delay line per directed link) as a [`Partitioner`]. Its delay adds to
//! the geography's latency, and a heal goes back to that latency.

use seatfence_testkit::links::LinkNet;

use super::Partitioner;

/// The userspace proxy mechanism.
pub type ProxyNet = LinkNet;

impl Partitioner for LinkNet {
    fn name(&self) -> &'static str {
        "proxy"
    }

    fn block(&self, from: u64, to: u64) -> anyhow::Result<()> {
        LinkNet::block(self, from, to)
    }

    fn delay_all(&self, ms: u64) -> anyhow::Result<()> {
        LinkNet::delay_all(self, ms);
        Ok(())
    }

    fn heal(&self) -> anyhow::Result<()> {
        LinkNet::heal(self);
        Ok(())
    }

    fn supports_delay(&self) -> bool {
        true
    }
}
