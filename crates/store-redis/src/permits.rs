//! [`PermitKeeper`]: the permits part of the store ([`presa_store::Permits`]):
//! a semaphore per limit and key, four keys under the limit's hash tag
//! `{c.<hex limit>}` (one slot, so each script touches one), run by
//! `acquire_permit.lua`, `renew_permit.lua` and `release_permit.lua` with
//! `permit.lua` (the purge and the keys' expiry) in front, by the server's
//! clock; `permit_usage.lua` reads a limit's semaphores for the admin view.

use std::{sync::Arc, time::Duration};

use presa_store::{Acquired, Holder, PermitName, PermitTerms, PermitUsage, Released, StoreError};

use crate::{
    link::Link,
    scripts::{Invocation, lua, script},
};

/// `permit.lua`: the keys, clock, purge and expiry the permit scripts share.
const PERMIT: &str = lua!("permit.lua");

script!(@ PERMIT, ACQUIRE, "acquire_permit.lua", Info, "Take a permit, or a place in its line.");
script!(@ PERMIT, RENEW, "renew_permit.lua", Debug, "Extend a holder's permit.");
script!(@ PERMIT, RELEASE, "release_permit.lua", Info, "Give a permit up; the waiters to wake.");
script!(USAGE, "permit_usage.lua", "A limit's semaphores: permits held and waiters.");

/// The most semaphores of a limit the admin view lists.
const MOST_KEYS: usize = 100;

/// The cluster's concurrency permits, over the store's [`Link`].
#[derive(Debug, Clone)]
pub(crate) struct PermitKeeper {
    link: Arc<Link>,
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

impl PermitKeeper {
    pub(crate) fn new(link: Arc<Link>) -> PermitKeeper {
        PermitKeeper { link }
    }

    /// `inv` with the semaphore's five keys; the semaphore's name in the index.
    fn keyed(&self, inv: &mut Invocation<'_>, name: &PermitName) -> String {
        let (keys, hex) = self.link.keys.permit(&name.limit, &name.key);
        for key in keys {
            inv.key(key);
        }
        hex
    }

    pub(crate) async fn acquire(
        &self,
        name: &PermitName,
        holder: &Holder,
        terms: PermitTerms,
    ) -> Result<Acquired, StoreError> {
        let mut inv = ACQUIRE.prepare_invoke();
        let hex = self.keyed(&mut inv, name);
        inv.arg(terms.permits.max(1)).arg(&holder.id).arg(holder.fence).arg(holder.order);
        inv.arg(ms(terms.lease)).arg(ms(terms.waiter_ttl)).arg(hex);
        let (code, in_use, ahead): (i64, u32, u32) = self.link.invoke(&inv).await?;
        Ok(match code {
            1 => Acquired::Granted,
            0 => Acquired::Waiting { in_use, ahead },
            _ => Acquired::Fenced,
        })
    }

    pub(crate) async fn renew(
        &self,
        name: &PermitName,
        holder: &Holder,
        terms: PermitTerms,
    ) -> Result<bool, StoreError> {
        let mut inv = RENEW.prepare_invoke();
        let hex = self.keyed(&mut inv, name);
        inv.arg(&holder.id).arg(holder.fence).arg(ms(terms.lease)).arg(ms(terms.waiter_ttl)).arg(hex);
        let renewed: i64 = self.link.invoke(&inv).await?;
        Ok(renewed == 1)
    }

    pub(crate) async fn release(
        &self,
        name: &PermitName,
        holder: &Holder,
        terms: PermitTerms,
    ) -> Result<Released, StoreError> {
        let mut inv = RELEASE.prepare_invoke();
        let hex = self.keyed(&mut inv, name);
        inv.arg(&holder.id).arg(holder.fence).arg(terms.permits.max(1)).arg(ms(terms.waiter_ttl)).arg(hex);
        let (released, wake): (i64, Vec<String>) = self.link.invoke(&inv).await?;
        Ok(Released { released: released == 1, wake })
    }

    pub(crate) async fn usage(&self, limit: &str) -> Result<Vec<PermitUsage>, StoreError> {
        let mut inv = USAGE.prepare_invoke();
        inv.key(self.link.keys.permit_index(limit)).arg(self.link.keys.permit_base(limit)).arg(MOST_KEYS);
        let flat: Vec<redis::Value> = self.link.invoke(&inv).await?;
        let mut out = Vec::new();
        for row in flat.chunks_exact(3) {
            let (Ok(hex), Ok(in_use), Ok(waiting)) = (
                redis::from_redis_value::<String>(row[0].clone()),
                redis::from_redis_value::<u32>(row[1].clone()),
                redis::from_redis_value::<u32>(row[2].clone()),
            ) else {
                continue;
            };
            out.push(PermitUsage { key: unhex(&hex), in_use, waiting });
        }
        out.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(out)
    }
}

/// The key a semaphore's hex name stands for (lossy for bytes that are not UTF-8).
fn unhex(hex: &str) -> String {
    let bytes: Vec<u8> =
        hex.as_bytes().chunks(2).filter_map(|p| u8::from_str_radix(std::str::from_utf8(p).ok()?, 16).ok()).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}
