//! Catalog shaping's tests, over descriptors like server-filesystem's:
//! the schema rewrite, expose and hide, renames and overrides, and what the
//! listing makes the gateway refuse.

use super::*;
use crate::config::{GatewayArgs, GatewayConfig};

/// The configuration of one upstream `fs` (prefix `fs_`) with `more` keys and tables.
fn config(more: &str) -> GatewayConfig {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gateway.toml");
    std::fs::write(&path, format!("[[upstream]]\nname = 'fs'\ncommand = 'x'\nprefix = 'fs_'\n{more}")).unwrap();
    let args = GatewayArgs { gateway_config: Some(path), upstream_pool: 1, ..GatewayArgs::default() };
    args.resolve().unwrap()
}

fn tool(name: &str, args: &[&str]) -> Value {
    let properties: Map<String, Value> = args.iter().map(|a| (a.to_string(), json!({ "type": "string" }))).collect();
    json!({
        "name": name,
        "description": format!("{name} upstream"),
        "inputSchema": { "type": "object", "properties": properties, "required": args },
        "annotations": { "readOnlyHint": true, "openWorldHint": false },
    })
}

/// Like server-filesystem's tools.
fn listing() -> Vec<Value> {
    vec![
        tool("read_text_file", &["path"]),
        tool("list_directory", &["path"]),
        tool("directory_tree", &["path", "excludePatterns"]),
        tool("write_file", &["path", "content"]),
        tool("move_file", &["source", "destination"]),
    ]
}

fn shaped(more: &str) -> Result<Vec<Shaped>, String> {
    shape_tools(&config(more).upstreams[0], &listing()).map_err(|e| e.to_string())
}

fn names(tools: &[Shaped]) -> Vec<&str> {
    tools.iter().map(|t| t.name.as_str()).collect()
}

#[test]
fn pinned_arguments_leave_the_schema_and_defaults_show_in_it() {
    let schema = json!({
        "type": "object",
        "properties": { "path": { "type": "string" }, "sortBy": { "type": "string" }, "n": { "type": "number" } },
        "required": ["path", "n", "sortBy"],
    });
    let pin = BTreeMap::from([("path".to_string(), json!("/srv/data"))]);
    let defaults = BTreeMap::from([("sortBy".to_string(), json!("size"))]);
    let out = input_schema(&schema, &pin, &defaults);
    assert_eq!(
        out,
        json!({
            "type": "object",
            "properties": { "sortBy": { "type": "string", "default": "size" }, "n": { "type": "number" } },
            "required": ["n"],
        })
    );
    // A required list left empty goes; a schema without properties is left alone.
    let only_path = json!({ "type": "object", "properties": { "path": {} }, "required": ["path"] });
    assert_eq!(input_schema(&only_path, &pin, &BTreeMap::new()), json!({ "type": "object", "properties": {} }));
    assert_eq!(input_schema(&json!(true), &pin, &defaults), json!(true));
}

#[test]
fn expose_and_hide_decide_what_is_served() {
    let all = shaped("").unwrap();
    assert_eq!(
        names(&all),
        ["fs_read_text_file", "fs_list_directory", "fs_directory_tree", "fs_write_file", "fs_move_file"]
    );
    let read_only = shaped("expose = ['read_*', 'list_*', 'directory_*']\nhide = ['directory_tree']").unwrap();
    assert_eq!(names(&read_only), ["fs_read_text_file", "fs_list_directory"]);
    let no_writes = shaped("hide = ['write_*', 'move_*']").unwrap();
    assert_eq!(names(&no_writes), ["fs_read_text_file", "fs_list_directory", "fs_directory_tree"]);
    // Unshaped tools are listed as the upstream lists them, with the prefix.
    let mut as_listed = tool("read_text_file", &["path"]);
    as_listed["name"] = json!("fs_read_text_file");
    assert_eq!(no_writes[0].descriptor, as_listed);
    assert_eq!((no_writes[0].upstream_name.as_str(), &no_writes[0].call.pin), ("read_text_file", &Map::new()));
}

#[test]
fn a_table_renames_overrides_and_pins() {
    let tools = shaped(
        "[[upstream.tool]]\nmatch = 'list_directory'\nrename = 'ls'\ndescription = 'Lists /srv/data'\n\
         title = 'Data'\nannotations = { idempotentHint = true, readOnlyHint = false }\n\
         pin = { path = '/srv/data' }\nmax_output_bytes = 4096\n\
         [[upstream.tool]]\nmatch = 'directory_*'\ndefaults = { excludePatterns = '*.tmp' }\n",
    )
    .unwrap();
    let ls = tools.iter().find(|t| t.upstream_name == "list_directory").unwrap();
    assert_eq!(ls.name, "fs_ls", "the prefix, then the new name");
    assert!(!names(&tools).contains(&"fs_list_directory"), "the old name is gone");
    assert_eq!(ls.descriptor["name"], "fs_ls");
    assert_eq!(ls.descriptor["description"], "Lists /srv/data");
    assert_eq!(ls.descriptor["title"], "Data");
    // Key by key: what the table gives replaces, the rest stays.
    assert_eq!(
        ls.descriptor["annotations"],
        json!({ "readOnlyHint": false, "idempotentHint": true, "openWorldHint": false })
    );
    assert_eq!(ls.descriptor["inputSchema"], json!({ "type": "object", "properties": {} }));
    assert_eq!(ls.call.pin, json!({ "path": "/srv/data" }).as_object().cloned().unwrap());
    assert_eq!((ls.call.tool.as_str(), ls.call.max_output_bytes), ("fs_ls", Some(4096)));
    let tree = tools.iter().find(|t| t.name == "fs_directory_tree").unwrap();
    assert_eq!(tree.descriptor["inputSchema"]["properties"]["excludePatterns"]["default"], "*.tmp");
    // A defaulted argument is no longer required: the gateway gives it when the call does not.
    assert_eq!(tree.descriptor["inputSchema"]["required"], json!(["path"]));
    assert_eq!(tree.call.defaults, json!({ "excludePatterns": "*.tmp" }).as_object().cloned().unwrap());
}

#[test]
fn what_the_listing_contradicts_is_refused_naming_the_table() {
    let e = shaped("[[upstream.tool]]\nmatch = 'list_directory'\npin = { paht = '/srv' }").unwrap_err();
    assert_eq!(
        e,
        "upstream \"fs\": [[upstream.tool]] match = \"list_directory\": pin: the tool \"list_directory\" has no \
         argument \"paht\" in its inputSchema (it has: path)"
    );
    let e = shaped("[[upstream.tool]]\nmatch = 'move_file'\ndefaults = { path = '/srv' }").unwrap_err();
    assert!(e.contains("defaults: the tool \"move_file\" has no argument \"path\""), "{e}");
    let e = shaped("[[upstream.tool]]\nmatch = 'lsit_*'\ntitle = 'x'").unwrap_err();
    assert!(e.contains("match = \"lsit_*\": it matches none of the tools"), "{e}");
    // A table over hidden tools only shapes nothing: a mistake too.
    let e = shaped("hide = ['write_*']\n[[upstream.tool]]\nmatch = 'write_file'\ntitle = 'x'").unwrap_err();
    assert!(e.contains("matches none"), "{e}");
    let e = shaped("[[upstream.tool]]\nmatch = '*_file'\nrename = 'file'").unwrap_err();
    assert!(e.contains("rename = \"file\" would give 3 tools one name (read_text_file, write_file, move_file)"), "{e}");
    let e = shaped("[[upstream.tool]]\nmatch = 'list_directory'\nrename = 'read_text_file'").unwrap_err();
    assert_eq!(
        e,
        "upstream \"fs\": the tools \"read_text_file\" and \"list_directory\" would both be listed as \
         \"fs_read_text_file\" ([[upstream.tool]] match = \"list_directory\" renames \"list_directory\"): hide one \
         of them (`hide`) or rename it to a name of its own"
    );
    // Renaming onto a hidden tool's name is no collision: it is not listed.
    let ok =
        shaped("hide = ['read_text_file']\n[[upstream.tool]]\nmatch = 'list_directory'\nrename = 'read_text_file'");
    assert_eq!(ok.map(|t| t[0].upstream_name.clone()), Ok("list_directory".to_string()));
}
