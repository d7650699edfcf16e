//! Task ids from clients: `TaskId::from_wire(..).partition()` (what every
//! store checks before an id may reach a key), plus the dispatcher's bounds.
#![no_main]

use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD};
use libfuzzer_sys::fuzz_target;
use presa_tasks::{TaskId, id::MAX_TASK_ID_LEN};

fuzz_target!(|data: &[u8]| {
    // Any 18 bytes make a generated id, which must name its partition.
    if let Some((p, random)) = data.split_first_chunk::<2>().and_then(|(p, r)| Some((p, r.first_chunk::<16>()?))) {
        let partition = u16::from_le_bytes(*p);
        let id = TaskId::from_random(partition, *random);
        assert_eq!(id.partition(), Some(partition), "{id}");
    }
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let id = TaskId::from_wire(s);
    if let Some(partition) = id.partition() {
        // A well-formed id is exactly what `from_random` writes: nothing else
        // (other alphabets, padding, extra zeros) names a partition.
        assert!(!s.is_empty() && s.len() <= MAX_TASK_ID_LEN);
        let (_, rest) = s.split_once('.').expect("a dot");
        let random: [u8; 16] = URL_SAFE_NO_PAD.decode(rest).expect("base64url").try_into().expect("16 bytes");
        assert_eq!(TaskId::from_random(partition, random).as_str(), s);
    }
});
