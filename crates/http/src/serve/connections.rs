//! The open connections of one listener ([`Connections`]): how many of each kind
//! ([`Kind`]), and which idle one to close when a new one needs room (see
//! the [`serve`](super) module docs).

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, MutexGuard, PoisonError},
    time::Duration,
};

use tokio::{sync::Notify, time::Instant};

use super::{
    EVICT_GRACE, NEW_CONNECTION_GRACE, ServeLimits,
    watch::{Standing, Watch},
};

/// What a connection may ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// Anything (one of the `max_connections`).
    Any,
    /// The [`PROBE_PATHS`] alone, one request (one of the `probe_connections`).
    Probe,
}

/// The open connections of one listener, by kind.
#[derive(Debug)]
pub(super) struct Connections {
    limits: ServeLimits,
    open: Mutex<Open>,
    /// Notified when a connection closes or its request ends (it may become idle).
    pub(super) changed: Arc<Notify>,
}

#[derive(Debug, Default)]
pub(super) struct Open {
    next_id: u64,
    connections: HashMap<u64, (Kind, Arc<Watch>)>,
    any: usize,
    probes: usize,
}

/// A connection's place in [`Connections`], given back on drop.
#[derive(Debug)]
pub(super) struct Ticket {
    slots: Arc<Connections>,
    id: u64,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut open = self.slots.open();
        match open.connections.remove(&self.id) {
            Some((Kind::Any, _)) => open.any -= 1,
            Some((Kind::Probe, _)) => open.probes -= 1,
            None => {}
        }
        drop(open);
        self.slots.changed.notify_one();
    }
}

impl Ticket {
    pub(super) fn kind(&self) -> Kind {
        self.slots.open().connections.get(&self.id).map_or(Kind::Probe, |(kind, _)| *kind)
    }

    /// Move a probe connection into one of the `max_connections`, closing
    /// an idle one for room if need be; `false` when none frees up within
    /// [`NEW_CONNECTION_GRACE`] and [`EVICT_GRACE`] (every connection busy).
    pub(super) async fn upgrade(&self) -> bool {
        let give_up = Instant::now() + NEW_CONNECTION_GRACE + EVICT_GRACE;
        loop {
            match self.slots.room_in(&[Kind::Any]) {
                Room::Free(_) => {
                    let mut open = self.slots.open();
                    if open.any < self.slots.limits.max_connections.max(1)
                        && let Some(entry) = open.connections.get_mut(&self.id)
                    {
                        entry.0 = Kind::Any;
                        open.any += 1;
                        open.probes -= 1;
                        return true;
                    }
                }
                Room::Idle(victim) => victim.evict(),
                Room::Full(_) => {}
            }
            if Instant::now() >= give_up {
                return false;
            }
            // Rare (every connection taken): a short poll rather than another waiter on `changed`.
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

impl Connections {
    pub(super) fn new(limits: ServeLimits) -> Self {
        Connections { limits, open: Mutex::new(Open::default()), changed: Arc::new(Notify::new()) }
    }

    fn open(&self) -> MutexGuard<'_, Open> {
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Where a connection accepted now would go (see the module docs).
    pub(super) fn room(&self) -> Room {
        self.room_in(&[Kind::Any, Kind::Probe])
    }

    /// [`Connections::room`] among `kinds`, in this order.
    fn room_in(&self, kinds: &[Kind]) -> Room {
        let open = self.open();
        let now = Instant::now();
        let mut wake: Option<Instant> = None;
        for &kind in kinds {
            let (used, cap) = match kind {
                Kind::Any => (open.any, self.limits.max_connections.max(1)),
                Kind::Probe => (open.probes, self.limits.probe_connections),
            };
            if used < cap {
                return Room::Free(kind);
            }
            let mut idlest: Option<((bool, Instant), &Arc<Watch>)> = None;
            for (_, watch) in open.connections.values().filter(|(k, _)| *k == kind) {
                match watch.standing(now) {
                    // It frees a slot within EVICT_GRACE.
                    Standing::Closing => return Room::Full(None),
                    Standing::Idle(order) if idlest.is_none_or(|(o, _)| order < o) => idlest = Some((order, watch)),
                    Standing::New(until) => wake = Some(wake.map_or(until, |w| w.min(until))),
                    Standing::Idle(_) | Standing::Busy => {}
                }
            }
            if let Some((_, watch)) = idlest {
                return Room::Idle(watch.clone());
            }
            // Every one of this kind has a request in flight (or just arrived): try the next kind.
        }
        Room::Full(wake)
    }

    /// Register `watch`'s connection in a free slot of `kind`, if there still is one.
    pub(super) fn admit(self: &Arc<Self>, kind: Kind, watch: &Arc<Watch>) -> Option<Ticket> {
        let mut open = self.open();
        match kind {
            Kind::Any if open.any < self.limits.max_connections.max(1) => open.any += 1,
            Kind::Probe if open.probes < self.limits.probe_connections => open.probes += 1,
            _ => return None,
        }
        open.next_id += 1;
        let id = open.next_id;
        open.connections.insert(id, (kind, watch.clone()));
        Some(Ticket { slots: self.clone(), id })
    }
}

/// What [`Connections::room`] found.
#[derive(Debug)]
pub(super) enum Room {
    /// A free slot of this kind.
    Free(Kind),
    /// None free, but this idle connection can be closed for one.
    Idle(Arc<Watch>),
    /// None: wait for a change (a connection closing or going idle), or
    /// until this instant (a new connection's grace ends).
    Full(Option<Instant>),
}
