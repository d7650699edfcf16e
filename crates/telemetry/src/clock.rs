//! The log lines' timestamp: the same RFC 3339 text as `tracing-subscriber`'s
//! default timer (`2026-12-07T04:12:32.123456Z`, UTC, microseconds), for
//! less. The default formats the whole date and time through `fmt` on every
//! line (about 3,200 instructions, a quarter of a worker's one line a
//! task); this one keeps the date and time of the last second per thread and
//! writes only the microseconds by hand.

use std::{
    cell::Cell,
    fmt,
    time::{SystemTime, UNIX_EPOCH},
};

use tracing_subscriber::fmt::{format::Writer, time::FormatTime};

/// `YYYY-MM-DDTHH:MM:SS.` (the part that changes once a second).
const PREFIX: usize = 20;
/// The whole stamp: the prefix, six digits of microseconds and `Z`.
const LEN: usize = PREFIX + 7;
/// The first second of year 10,000: from there on the year takes more than
/// four digits, and the default timer writes it.
const MAX_SECS: u64 = 253_402_300_800;

thread_local! {
    /// The second last stamped on this thread, and its prefix.
    static LAST: Cell<(u64, [u8; PREFIX])> = const { Cell::new((u64::MAX, [0; PREFIX])) };
}

/// The log layers' timer (see the module docs).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Rfc3339;

impl FormatTime for Rfc3339 {
    fn format_time(&self, w: &mut Writer<'_>) -> fmt::Result {
        match SystemTime::now().duration_since(UNIX_EPOCH) {
            Ok(d) if d.as_secs() < MAX_SECS => {
                let buf = stamp(d.as_secs(), d.subsec_micros());
                w.write_str(std::str::from_utf8(&buf).map_err(|_| fmt::Error)?)
            }
            // A clock before 1970 or past year 9999: the default's text.
            _ => tracing_subscriber::fmt::time::SystemTime.format_time(w),
        }
    }
}

/// The stamp of `secs` after the epoch (below [`MAX_SECS`]) and `micros`.
fn stamp(secs: u64, micros: u32) -> [u8; LEN] {
    let (last, mut prefix) = LAST.with(Cell::get);
    if last != secs {
        prefix = date_time(secs);
        LAST.with(|c| c.set((secs, prefix)));
    }
    let mut buf = [0u8; LEN];
    buf[..PREFIX].copy_from_slice(&prefix);
    let mut m = micros.min(999_999);
    for i in (PREFIX..PREFIX + 6).rev() {
        buf[i] = b'0' + (m % 10) as u8;
        m /= 10;
    }
    buf[LEN - 1] = b'Z';
    buf
}

/// `YYYY-MM-DDTHH:MM:SS.` of `secs` after the epoch (UTC, proleptic Gregorian).
fn date_time(secs: u64) -> [u8; PREFIX] {
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (year, month, day) = presa_protocol::calendar::civil_from_days(days);
    let mut p = *b"0000-00-00T00:00:00.";
    put(&mut p[0..4], year);
    put(&mut p[5..7], month);
    put(&mut p[8..10], day);
    put(&mut p[11..13], rem / 3_600);
    put(&mut p[14..16], rem / 60 % 60);
    put(&mut p[17..19], rem % 60);
    p
}

/// `n`'s last `out.len()` decimal digits into `out`, zero-padded.
fn put(out: &mut [u8], mut n: u64) {
    for b in out.iter_mut().rev() {
        *b = b'0' + (n % 10) as u8;
        n /= 10;
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// The stamp as text.
    fn text(secs: u64, micros: u32) -> String {
        String::from_utf8(stamp(secs, micros).to_vec()).expect("ASCII")
    }

    /// What `humantime` (an independent RFC 3339 formatter) writes for the same instant.
    fn expected(secs: u64, micros: u32) -> String {
        let t = UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_micros(u64::from(micros));
        humantime::format_rfc3339_micros(t).to_string()
    }

    #[test]
    fn matches_an_independent_formatter_across_the_calendar() {
        let fixed = [
            0,             // the epoch
            951_782_399,   // 2000-02-28T23:59:59
            951_782_400,   // 2000-02-29 (a leap day of a 400th year)
            951_868_800,   // 2000-03-01
            4_107_542_400, // 2100-03-01 (2100 is no leap year)
            1_796_616_752, // 2026-12-07
            MAX_SECS - 1,  // 9999-12-31T23:59:59
        ];
        // And a day's worth of seconds scattered over four centuries.
        let scattered = (0..86_400u64).map(|i| i.wrapping_mul(2_654_435_761) % 12_622_780_800);
        for secs in fixed.into_iter().chain(scattered) {
            for micros in [0, 7, 123_456, 999_999] {
                assert_eq!(text(secs, micros), expected(secs, micros), "secs {secs}, micros {micros}");
            }
        }
    }

    #[test]
    fn the_cached_second_is_not_reused_for_another() {
        assert_eq!(text(1_796_616_752, 1), "2026-12-07T04:12:32.000001Z");
        assert_eq!(text(1_796_616_752, 2), "2026-12-07T04:12:32.000002Z");
        assert_eq!(text(1_796_616_753, 0), "2026-12-07T04:12:33.000000Z");
        assert_eq!(text(0, 0), "1970-01-01T00:00:00.000000Z");
    }

    #[test]
    fn writes_the_same_text_as_the_default_timer() {
        let (mut ours, mut theirs) = (String::new(), String::new());
        Rfc3339.format_time(&mut Writer::new(&mut ours)).expect("formats");
        tracing_subscriber::fmt::time::SystemTime.format_time(&mut Writer::new(&mut theirs)).expect("formats");
        assert_eq!(ours.len(), theirs.len(), "{ours} vs {theirs}");
        // The same second (or the next, if it turned between the two reads).
        let secs = |s: &str| humantime::parse_rfc3339(s).expect("RFC 3339").duration_since(UNIX_EPOCH).expect("after");
        let gap = secs(&theirs).saturating_sub(secs(&ours));
        assert!(gap < Duration::from_secs(1), "{ours} vs {theirs}");
    }
}
