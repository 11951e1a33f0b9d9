//! Tool descriptors off the wire: `descriptor::check` (every announce, with
//! the registry's default `--max-tool-timeout`) and
//! `descriptor::differences` (an announce against the live descriptor).
//! A descriptor never differs from itself, and `differences` is symmetric
//! in which fields it names.
//!
//! Input: two protobuf `ToolDescriptor`s, the live one length-delimited
//! (a varint length, then the message), the announced one the rest.
#![no_main]

use libfuzzer_sys::fuzz_target;
use prost::Message;
use toolmesh_proto::pb::ToolDescriptor;
use toolmesh_registry::Config;
use toolmesh_registry::catalog::descriptor::{self, Limit};

fuzz_target!(|data: &[u8]| {
    let mut rest = data;
    let Ok(live) = ToolDescriptor::decode_length_delimited(&mut rest) else {
        return;
    };
    let Ok(new) = ToolDescriptor::decode(rest) else {
        return;
    };
    let max_timeout = Config::default().max_tool_timeout;
    for (field, d) in [("tools[0]", &live), ("tools[1]", &new)] {
        match descriptor::check(d, field, max_timeout) {
            Ok(()) => {
                if let Some(limit) = Limit::of(d) {
                    assert!(limit.burst >= 1, "{limit:?}");
                    let _ = limit.period();
                }
                if let Some(timeout) = descriptor::timeout(d) {
                    assert!(timeout <= max_timeout, "{timeout:?}");
                }
            }
            Err(error) => {
                let _ = error.to_status();
            }
        }
    }
    let same = descriptor::differences(&live, &live);
    assert!(
        same.is_empty(),
        "a descriptor differs from itself: {same:?}"
    );
    let there = descriptor::differences(&live, &new);
    let back = descriptor::differences(&new, &live);
    let field = |line: &String| line.split(':').next().map(str::to_owned);
    assert_eq!(
        there.iter().map(field).collect::<Vec<_>>(),
        back.iter().map(field).collect::<Vec<_>>()
    );
});
