//! Modules shipped with a function (`PythonSpec::files`): imported from memory, packages and
//! their submodules, data files through `pkgutil.get_data`; nothing else becomes importable.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{Array, Int64Array};
use arrow_schema::DataType;

use crate::{batch, call, runtime, spec};

fn file(path: &str, text: &str) -> (String, Vec<u8>) {
    (path.to_string(), text.as_bytes().to_vec())
}

#[test]
fn shipped_modules_packages_and_data_files_are_importable() {
    let mut s = spec(
        "import helpers\nfrom tools.scale import scale\n\
         def f(x):\n    return scale(helpers.offset(x))\n",
        "f",
    );
    s.files = vec![
        file("helpers.py", "def offset(x):\n    return x + 1\n"),
        file(
            "tools/__init__.py",
            "import pkgutil\nfrom importlib.metadata import version\n\
             assert version('tools') == '2.5'\n\
             FACTOR = int(pkgutil.get_data(__name__, 'factor.txt'))\n",
        ),
        file(
            "tools/scale.py",
            "from . import FACTOR\ndef scale(x):\n    return x * FACTOR\n",
        ),
        file("tools/factor.txt", "10"),
        file(
            "tools-2.5.dist-info/METADATA",
            "Metadata-Version: 2.1\nName: tools\nVersion: 2.5\n",
        ),
    ];
    let udf = runtime().prepare_python(&s).expect("prepared");
    let input = batch(vec![("x", Arc::new(Int64Array::from(vec![1, 2, 3])))]);
    let out = call(&udf, "t1", &input, &DataType::Int64).unwrap();
    let got = out.array.as_primitive::<arrow_array::types::Int64Type>();
    assert_eq!(got.values().to_vec(), vec![20, 30, 40]);
    assert_eq!(got.null_count(), 0);
}

#[test]
fn errors_in_shipped_modules_name_the_file_and_unshipped_modules_stay_refused() {
    let mut s = spec("import helpers\ndef f(x):\n    return x\n", "f");
    s.files = vec![file("helpers.py", "x = 1 +\n")];
    let err = runtime().prepare_python(&s).unwrap_err().to_string();
    assert!(
        err.contains("SyntaxError") && err.contains("helpers.py line 1"),
        "{err}"
    );

    let s = spec("import helpers\ndef f(x):\n    return x\n", "f");
    let err = runtime().prepare_python(&s).unwrap_err().to_string();
    assert!(err.contains("module 'helpers' is not available"), "{err}");

    let mut s = spec("def f(x):\n    return x\n", "f");
    s.files = vec![file("../escape.py", "")];
    let err = runtime().prepare_python(&s).unwrap_err().to_string();
    assert!(err.contains("not a relative file path"), "{err}");
}
