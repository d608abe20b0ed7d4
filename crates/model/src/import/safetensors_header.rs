//! Why the `safetensors` crate refuses a file, tensor by tensor: its own messages ("invalid
//! shape, data type, or offset for tensor", "incomplete metadata") name neither the tensor nor
//! what is wrong with it. Read only after the crate has refused the file.

use serde::Deserialize;
use serde_json::{Map, Value};

/// One tensor's entry in the header.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    dtype: String,
    shape: Vec<u64>,
    data_offsets: [u64; 2],
}

/// Bits per element of the dtypes safetensors defines.
fn bits(dtype: &str) -> Option<u64> {
    Some(match dtype {
        "F4" => 4,
        "F6_E2M3" | "F6_E3M2" => 6,
        "BOOL" | "U8" | "I8" | "F8_E5M2" | "F8_E4M3" | "F8_E8M0" => 8,
        "I16" | "U16" | "F16" | "BF16" => 16,
        "I32" | "U32" | "F32" => 32,
        "I64" | "U64" | "F64" | "C64" => 64,
        _ => return None,
    })
}

/// What is wrong with `bytes` as a safetensors file, naming the tensor; `None` when this finds
/// nothing (the crate's message is then all there is).
pub fn explain(bytes: &[u8]) -> Option<String> {
    let Some(len) = bytes.get(..8) else {
        return Some(format!("{} bytes, shorter than the 8-byte header length", bytes.len()));
    };
    let n = u64::from_le_bytes(len.try_into().ok()?);
    let rest = bytes.len() as u64 - 8;
    if n > rest {
        return Some(format!("the header length says {n} bytes, but only {rest} follow it (a truncated file?)"));
    }
    let header: Map<String, Value> = match serde_json::from_slice(&bytes[8..8 + n as usize]) {
        Ok(h) => h,
        Err(e) => return Some(format!("the {n}-byte header is not a JSON object: {e}")),
    };
    let data = rest - n;
    let mut spans = Vec::new();
    for (name, value) in header.iter().filter(|(k, _)| k.as_str() != "__metadata__") {
        let e: Entry = match serde_json::from_value(value.clone()) {
            Ok(e) => e,
            Err(err) => return Some(format!("tensor '{name}': its header entry is invalid: {err}")),
        };
        let [start, end] = e.data_offsets;
        let Some(bits) = bits(&e.dtype) else {
            return Some(format!("tensor '{name}' has dtype '{}', which safetensors does not define", e.dtype));
        };
        let Some(need) = e.shape.iter().try_fold(bits, |a, &d| a.checked_mul(d)).map(|b| b.div_ceil(8)) else {
            return Some(format!("tensor '{name}': shape {:?} is too large (its size overflows)", e.shape));
        };
        if end < start {
            return Some(format!("tensor '{name}' has data_offsets [{start}, {end}]: the end is before the start"));
        }
        if end - start != need {
            return Some(format!(
                "tensor '{name}' ({}, shape {:?}) has data_offsets [{start}, {end}], {} bytes, but its shape and \
                 dtype need {need}",
                e.dtype,
                e.shape,
                end - start
            ));
        }
        if end > data {
            return Some(format!(
                "tensor '{name}' has data_offsets [{start}, {end}], past the end of the {data}-byte data section \
                 (a truncated file?)"
            ));
        }
        spans.push((start, end, name.as_str()));
    }
    spans.sort();
    let mut at = 0;
    let mut before = "the header".to_string();
    for (start, end, name) in spans {
        if start != at {
            let what = if start > at { "leaves a gap" } else { "overlaps" };
            return Some(format!(
                "tensor '{name}' starts at byte {start} of the data, but {before} ends at {at}: it {what}"
            ));
        }
        (at, before) = (end, format!("tensor '{name}'"));
    }
    if at != data {
        return Some(format!(
            "the data section is {data} bytes, but the tensors cover {at} (trailing bytes, or a truncated file)"
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(header: &str, data: usize) -> Vec<u8> {
        let mut b = (header.len() as u64).to_le_bytes().to_vec();
        b.extend_from_slice(header.as_bytes());
        b.resize(b.len() + data, 0);
        b
    }

    #[test]
    fn each_defect_names_the_tensor_and_what_is_wrong() {
        let ok = r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F16","shape":[2],"data_offsets":[8,12]}}"#;
        assert_eq!(explain(&file(ok, 12)), None);
        let cases = [
            (
                ok.replace("[2],\"data_offsets\":[0,8]", "[3],\"data_offsets\":[0,8]"),
                12,
                "tensor 'a' (F32, shape [3]) has data_offsets [0, 8], 8 bytes, but its shape and dtype need 12",
            ),
            (ok.replace("F16", "Q9"), 12, "tensor 'b' has dtype 'Q9'"),
            (ok.to_string(), 10, "tensor 'b' has data_offsets [8, 12], past the end of the 10-byte data section"),
            (ok.to_string(), 14, "the data section is 14 bytes, but the tensors cover 12"),
            (
                ok.replace("[8,12]", "[6,10]"),
                12,
                "tensor 'b' starts at byte 6 of the data, but tensor 'a' ends at 8: it overlaps",
            ),
            (
                ok.replace("\"shape\":[2],\"data_offsets\":[0,8]", "\"shape\":\"x\",\"data_offsets\":[0,8]"),
                12,
                "tensor 'a': its header entry is invalid",
            ),
        ];
        for (header, data, want) in cases {
            let got = explain(&file(&header, data)).unwrap_or_default();
            assert!(got.contains(want), "{got}\nwanted: {want}");
        }
        let mut truncated = file(ok, 12);
        truncated.truncate(20);
        assert!(explain(&truncated).unwrap().contains("only 12 follow it"));
    }
}
