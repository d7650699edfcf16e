//! [`CatalogCell`]: a catalog that may be replaced while it is served, and
//! the signal that tells who must announce the change.

use std::{fmt, sync::Arc};

use super::Catalog;

/// A catalog that may be replaced while it is served (presa-gateway follows
/// its upstream's list): readers take the current one, a replacement is seen
/// by the next request, and [`CatalogCell::changes`] tells who must announce
/// it (`notifications/tools/list_changed`). Cheap to clone; clones share it.
#[derive(Clone)]
pub struct CatalogCell {
    current: Arc<arc_swap::ArcSwap<Catalog>>,
    changes: Arc<tokio::sync::watch::Sender<u64>>,
}

impl fmt::Debug for CatalogCell {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("CatalogCell").field(&*self.current.load()).finish()
    }
}

impl From<Catalog> for CatalogCell {
    fn from(catalog: Catalog) -> Self {
        CatalogCell {
            current: Arc::new(arc_swap::ArcSwap::from_pointee(catalog)),
            changes: Arc::new(tokio::sync::watch::Sender::new(0)),
        }
    }
}

impl CatalogCell {
    /// The catalog now.
    pub fn load(&self) -> Arc<Catalog> {
        self.current.load_full()
    }

    /// Serve `catalog` from the next request on, and tell [`CatalogCell::changes`] watchers.
    pub fn replace(&self, catalog: Catalog) {
        self.current.store(Arc::new(catalog));
        self.changes.send_modify(|n| *n += 1);
    }

    /// Fires after each [`CatalogCell::replace`].
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changes.subscribe()
    }
}
