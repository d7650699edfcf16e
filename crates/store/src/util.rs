//! Helpers shared by every store implementation and by their callers.

use std::time::{SystemTime, UNIX_EPOCH};

use presa_tasks::TaskId;
use rand::Rng;

/// Unix time in milliseconds.
pub fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// A fresh task id on a random partition in `0..partitions`, with 128 bits
/// from `rand`'s thread CSPRNG (ChaCha, seeded by the OS).
pub fn new_task_id(partitions: u16) -> TaskId {
    new_task_id_in(partitions, None)
}

/// [`new_task_id`] on `partition` when one is given (a keyed create,
/// [`Idempotency::partition`](crate::Idempotency::partition)).
pub fn new_task_id_in(partitions: u16, partition: Option<u16>) -> TaskId {
    let mut random = [0u8; 16];
    rand::rng().fill_bytes(&mut random);
    let partition = partition.unwrap_or(u16::from(random[0]) << 8 | u16::from(random[1])) % partitions.max(1);
    TaskId::from_random(partition, random)
}
