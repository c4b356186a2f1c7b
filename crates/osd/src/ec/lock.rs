//! Per-stripe locks at the primary: a stripe's writes, reads and repairs hold its lock, so
//! readers never see a stripe half promoted.

use basalt_proto::ObjectId;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Per-stripe async locks; an entry lives while someone holds or waits for it.
#[derive(Default)]
pub(crate) struct StripeLocks {
    table: Arc<Mutex<HashMap<ObjectId, Arc<tokio::sync::Mutex<()>>>>>,
}

/// A held stripe lock; released (and its entry forgotten when unused) on drop.
pub(crate) struct StripeGuard {
    guard: Option<tokio::sync::OwnedMutexGuard<()>>,
    table: Arc<Mutex<HashMap<ObjectId, Arc<tokio::sync::Mutex<()>>>>>,
    stripe: ObjectId,
}

impl StripeLocks {
    /// Lock `stripe` — and with it the same stripe of every layer of its clone family, so a
    /// write that reads an ancestor's stripe never races a copy-up or merge of that index.
    pub(crate) async fn lock(&self, stripe: ObjectId) -> StripeGuard {
        let stripe = ObjectId::new(basalt_proto::inode_family(stripe.inode) << 16, stripe.index);
        let lock = {
            let mut table = self.table.lock().expect("stripe lock table");
            table.entry(stripe).or_default().clone()
        };
        StripeGuard {
            guard: Some(lock.lock_owned().await),
            table: self.table.clone(),
            stripe,
        }
    }
}

impl Drop for StripeGuard {
    fn drop(&mut self) {
        drop(self.guard.take());
        let mut table = self.table.lock().expect("stripe lock table");
        if table
            .get(&self.stripe)
            .is_some_and(|l| Arc::strong_count(l) == 1)
        {
            table.remove(&self.stripe);
        }
    }
}
