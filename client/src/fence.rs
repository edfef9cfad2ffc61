//! Epoch fences on the client's side: the highest epoch seen per event (an
//! answer's `X-Seatfence-Epoch`); an answer below it came from a former
//! owner of the event and is refused.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::error::ClientError;

/// The highest epoch seen of each event.
#[derive(Debug, Default)]
pub struct Fences {
    seen: Mutex<HashMap<String, u64>>,
}

impl Fences {
    /// Take `epoch` of `event` from an answer: an error when it is below
    /// one already seen (nothing recorded), else it is remembered.
    pub fn observe(&self, event: &str, epoch: u64) -> Result<(), ClientError> {
        let mut seen = self.seen.lock().expect("fences lock poisoned");
        let at = seen.entry(event.to_string()).or_insert(epoch);
        if epoch < *at {
            return Err(ClientError::StaleEpoch {
                event: event.to_string(),
                seen: *at,
                got: epoch,
            });
        }
        *at = epoch;
        Ok(())
    }

    /// The highest epoch seen of `event`.
    pub fn get(&self, event: &str) -> Option<u64> {
        self.seen
            .lock()
            .expect("fences lock poisoned")
            .get(event)
            .copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_older_epoch_is_refused_and_a_newer_one_kept() {
        let f = Fences::default();
        f.observe("e", 2).unwrap();
        f.observe("e", 2).unwrap();
        assert!(matches!(
            f.observe("e", 1),
            Err(ClientError::StaleEpoch {
                seen: 2,
                got: 1,
                ..
            })
        ));
        f.observe("e", 3).unwrap();
        assert_eq!(f.get("e"), Some(3));
        f.observe("other", 1).unwrap();
    }
}
