//! [`RateKeeper`]: the rates part of the store ([`presa_store::Rates`]):
//! one string key per rate, `{prefix}:{r.<hex of its name>}:rate`, in a slot
//! of its own, taken by `rate.lua` (GCRA by the server's clock).

use std::{sync::Arc, time::Duration};

use presa_store::{Rate, StoreError, Take, Taken};

use crate::{link::Link, scripts::script};

script!(RATE, "rate.lua", "Take one of a rate (GCRA), or answer how long until one passes.");

/// The cluster's rates, over the store's [`Link`].
#[derive(Debug, Clone)]
pub(crate) struct RateKeeper {
    link: Arc<Link>,
}

impl RateKeeper {
    pub(crate) fn new(link: Arc<Link>) -> RateKeeper {
        RateKeeper { link }
    }

    pub(crate) async fn take(&self, key: &str, rate: Rate, how: Take) -> Result<Taken, StoreError> {
        let mut inv = RATE.prepare_invoke();
        let micros = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        let reserve = match how {
            Take::Now => "",
            Take::Reserve => "reserve",
        };
        inv.key(self.link.keys.rate(key)).arg(micros(rate.interval)).arg(micros(rate.tolerance())).arg(reserve);
        let wait: i64 = self.link.invoke(&inv).await?;
        Ok(match (u64::try_from(wait), how) {
            (Ok(0) | Err(_), _) => Taken::Admitted,
            (Ok(us), Take::Now) => Taken::Wait(Duration::from_micros(us)),
            (Ok(us), Take::Reserve) => Taken::Reserved(Duration::from_micros(us)),
        })
    }
}
