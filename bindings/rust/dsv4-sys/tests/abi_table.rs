//! The declarations of this crate against the C compiler's view of the public headers: the table
//! written by tests/abi/gen_abi_table.py ($DSV4_ABI_TABLE). Every struct (size, alignment, each
//! field's name, offset and size, in order), function and constant must agree, both ways.
use std::collections::BTreeMap;

fn table() -> Vec<Vec<String>> {
    let path = std::env::var("DSV4_ABI_TABLE").expect("DSV4_ABI_TABLE names the ABI table");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {}", path, e));
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| l.split_whitespace().map(str::to_string).collect())
        .collect()
}

#[test]
fn structs_match_the_c_layout() {
    let mut c_structs: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for row in table() {
        match row[0].as_str() {
            "struct" => {
                c_structs.insert(row[1].clone(), vec![format!("size {} align {}", row[2], row[3])]);
            }
            "field" => c_structs
                .get_mut(&row[1])
                .expect("field before its struct")
                .push(format!("{} at {} size {}", row[2], row[3], row[4])),
            _ => {}
        }
    }
    let mut rust_structs: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for s in dsv4_sys::struct_layouts() {
        let mut rows = vec![format!("size {} align {}", s.size, s.align)];
        rows.extend(s.fields.iter().map(|f| format!("{} at {} size {}", f.name, f.offset, f.size)));
        rust_structs.insert(s.name.to_string(), rows);
    }
    assert!(!c_structs.is_empty());
    assert_eq!(
        rust_structs, c_structs,
        "dsv4-sys structs (left) differ from the C headers (right)"
    );
}

/// The enum-like constant families every binding mirrors in full.
const CONSTANT_FAMILIES: &[&str] = &[
    "DSV4_STATUS_",
    "DSV4_DEVICE_",
    "DSV4_DTYPE_CODE_",
    "DSV4_KV_LAYOUT_",
    "DSV4_KV_CACHE_FLAG_",
    "DSV4_LOG_",
    "DSV4_MODE_",
    "DSV4_INDEX_",
    "DSV4_PLAN_FLAG_",
    "DSV4_EXPORT_",
    "DSV4_VERSION_",
];

#[test]
fn functions_and_constants_match() {
    let rows = table();
    let mut c_functions: Vec<&str> =
        rows.iter().filter(|r| r[0] == "function").map(|r| r[1].as_str()).collect();
    let mut rust_functions = dsv4_sys::Api::SYMBOLS.to_vec();
    c_functions.sort_unstable();
    rust_functions.sort_unstable();
    assert_eq!(rust_functions, c_functions, "dsv4-sys functions (left) vs the C headers (right)");

    let c_constants: BTreeMap<&str, i64> = rows
        .iter()
        .filter(|r| r[0] == "constant")
        .map(|r| (r[1].as_str(), r[2].parse().expect("constant value")))
        .collect();
    // Every constant declared here has the header's value; every member of the enum-like families
    // is declared (standalone constants, such as limits, may be left out).
    for (name, value) in dsv4_sys::CONSTANTS {
        assert_eq!(c_constants.get(name), Some(value), "dsv4-sys {} vs the C headers", name);
    }
    for name in c_constants.keys().filter(|n| CONSTANT_FAMILIES.iter().any(|f| n.starts_with(f))) {
        assert!(
            dsv4_sys::CONSTANTS.iter().any(|(n, _)| n == name),
            "{} is in the C headers but not in dsv4-sys",
            name
        );
    }
}

#[test]
fn loads_and_reports_its_version() {
    let api = dsv4_sys::Api::load().expect("libdsv4 ($DSV4_LIBRARY or libdsv4.so.0)");
    // SAFETY: plain queries without arguments.
    let version = unsafe { (api.dsv4_get_version)() };
    assert_eq!(version, dsv4_sys::DSV4_VERSION_NUMBER);
    match dsv4_sys::Api::open("/nonexistent/libdsv4.so.0") {
        Err(e) => assert!(e.contains("cannot load"), "{}", e),
        Ok(_) => panic!("a missing library loaded"),
    }
}
