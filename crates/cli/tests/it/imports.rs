//! The CLI's files in layers: no file names (through `crate::`, `super::`
//! or `self::`) a file that names it back, directly or through others
//! (`test_support::modgraph`). A circle would tie the operator's
//! commands into one knot again, as `mount` and `watch` were, each
//! naming the other.

use std::path::Path;

#[test]
fn no_files_of_the_cli_import_each_other_in_a_circle() {
    test_support::modgraph::assert_no_import_circle(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
    );
}
