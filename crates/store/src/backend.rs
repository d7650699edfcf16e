//! [`Backend`]: every store trait a server runs on, served by one object.

use std::sync::Arc;

use crate::{
    admin::AdminStore, breakers::Breakers, bus::EventBus, dead::DeadLetters, permits::Permits, queue::WorkQueue,
    rates::Rates, records::TaskStore, session::SessionStore,
};

/// The records, work queue, dead letters, bus, admin reads and legacy
/// sessions a server runs on. Both implementations serve every trait from
/// one object; [`Backend::new`] takes it once.
#[derive(Debug, Clone)]
pub struct Backend {
    /// The durable task records.
    pub store: Arc<dyn TaskStore>,
    /// The work queue over those records.
    pub work: Arc<dyn WorkQueue>,
    /// Dead letters of poison tasks.
    pub dead: Arc<dyn DeadLetters>,
    /// The server-wide broadcast.
    pub bus: Arc<dyn EventBus>,
    /// Listings and the process registry, for the admin API and heartbeats.
    pub admin: Arc<dyn AdminStore>,
    /// The shared state of legacy (2025-11-25) sessions.
    pub sessions: Arc<dyn SessionStore>,
    /// Rates that span the cluster.
    pub rates: Arc<dyn Rates>,
    /// Circuit breakers that span the cluster.
    pub breakers: Arc<dyn Breakers>,
    /// Concurrency permits that span the cluster.
    pub permits: Arc<dyn Permits>,
}

impl Backend {
    /// A backend served by one object behind every trait.
    pub fn new<T: WorkQueue + DeadLetters + EventBus + AdminStore + SessionStore + Rates + Breakers + Permits>(
        all: Arc<T>,
    ) -> Self {
        Backend {
            store: all.clone(),
            work: all.clone(),
            dead: all.clone(),
            bus: all.clone(),
            admin: all.clone(),
            sessions: all.clone(),
            rates: all.clone(),
            breakers: all.clone(),
            permits: all,
        }
    }
}
