"""Install the optional compiled fast path (kprotocol._speedups) over generated Python codecs.

Each generated module lists, per decoder/encoder function, a table of field operations. With the
extension built (and `KPROTOCOL_PURE_PYTHON` unset), `cls._decoders`/`cls._encoders` point at
compiled plans and the Python functions stay in `_py_decoders`/`_py_encoders`: the plans call
them for anything unusual and the message API reruns them to report errors precisely. Python
decoders running as a fallback reach nested structs through their compiled plans.
"""

from __future__ import annotations

import os
from typing import Any

from kprotocol.runtime.primitives import make_uuid

try:
    if os.environ.get("KPROTOCOL_PURE_PYTHON"):
        raise ImportError("disabled by KPROTOCOL_PURE_PYTHON")
    from kprotocol import _speedups
except ImportError:  # pure-Python installs still work, only slower
    _speedups = None  # type: ignore[assignment]
else:
    _speedups.configure(make_uuid)

ENABLED = _speedups is not None


def install_plans(namespace: dict[str, Any], entries: tuple) -> None:
    if _speedups is None:
        return
    built: dict[str, Any] = {}
    for name, cls_name, slots, ops in entries:
        resolved = tuple(op if op[6] is None else (*op[:6], built[op[6]], *op[7:]) for op in ops)
        built[name] = _speedups.Plan(namespace[cls_name], slots, resolved, namespace[name])
    for value in list(namespace.values()):
        table = getattr(value, "__dict__", {}).get("_decoders")
        if table is None or not isinstance(value, type):
            continue
        value._py_decoders = table
        value._py_encoders = value._encoders
        value._decoders = {v: built[fn.__name__].decode for v, fn in table.items()}
        value._encoders = {v: built[fn.__name__].encode for v, fn in value._py_encoders.items()}
    # A Python decoder running as a fallback (tagged fields present, say) decodes the structs nested
    # in it through their compiled plans; each plan keeps its own Python function as its fallback.
    for name, plan in built.items():
        if name.startswith("_d_"):
            namespace[name] = plan.decode
