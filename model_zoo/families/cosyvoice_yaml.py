"""CosyVoice's release config (cosyvoice2.yaml) read as data. The file is HyperPyYAML: `!new:pkg.Class` / `!name:
pkg.fn` mappings construct objects, `!ref <key>` refers to another value (with arithmetic: `!ref <a> * <b>`),
`!apply:fn [...]` calls a function (the random seeds). Nothing is imported or called here: a `!new:` / `!name:` mapping
becomes a dict of its arguments with its target under "__target__", `!apply:` becomes None, references are resolved
and simple arithmetic over numbers evaluated."""
from __future__ import annotations

import ast
import operator
import re
from typing import Any

_REF = re.compile(r"<([^<>]+)>")
_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
        ast.FloorDiv: operator.floordiv, ast.Pow: operator.pow, ast.USub: operator.neg}


class _Ref(str):
    """An unresolved `!ref` expression."""


def _loader():
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    # YAML 1.2 floats (HyperPyYAML reads with ruamel): 1e-06 is a number, not PyYAML 1.1's string
    Loader.add_implicit_resolver("tag:yaml.org,2002:float", re.compile(
        r"^[-+]?(?:\d+\.?\d*|\.\d+)[eE][-+]?\d+$"), list("-+0123456789."))

    def target(loader, suffix, node):
        if isinstance(node, yaml.MappingNode):
            value = loader.construct_mapping(node, deep=True)
        elif isinstance(node, yaml.SequenceNode):
            value = {"__args__": loader.construct_sequence(node, deep=True)}
        else:
            value = {}
        return {"__target__": suffix, **value}

    Loader.add_multi_constructor("!new:", target)
    Loader.add_multi_constructor("!name:", target)
    Loader.add_multi_constructor("!apply:", lambda loader, suffix, node: None)
    Loader.add_constructor("!ref", lambda loader, node: _Ref(loader.construct_scalar(node)))
    return Loader


def _lookup(root: dict, key: str):
    value: Any = root
    for part in re.split(r"[.\[\]]+", key.strip()):
        if not part:
            continue
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            raise ValueError(f"!ref <{key}>: no such key in the config")
    return value


def _arith(node):
    if isinstance(node, ast.Expression):
        return _arith(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_arith(node.left), _arith(node.right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_arith(node.operand))
    raise ValueError("only arithmetic over numbers is allowed in a !ref expression")


def _resolve(value, root: dict, depth: int = 0):
    if depth > 50:
        raise ValueError("!ref references form a cycle")
    if isinstance(value, _Ref):
        refs = _REF.findall(value)
        if len(refs) == 1 and value.strip() == f"<{refs[0]}>":   # a plain reference: the value itself, any type
            return _resolve(_lookup(root, refs[0]), root, depth + 1)
        expr = _REF.sub(lambda m: repr(_resolve(_lookup(root, m.group(1)), root, depth + 1)), value)
        return _arith(ast.parse(expr, mode="eval"))
    if isinstance(value, dict):
        return {k: _resolve(v, root, depth) for k, v in value.items()}
    if isinstance(value, list):
        return [_resolve(v, root, depth) for v in value]
    return value


def read_hyperpyyaml(path: str) -> dict:
    import yaml
    with open(path, encoding="utf-8") as f:
        try:
            raw = yaml.load(f, Loader=_loader())
        except yaml.YAMLError as e:
            raise ValueError(f"{path}: not a readable YAML file ({e})") from None
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: the top level is not a mapping")
    return _resolve(raw, raw)


def plain(value):
    """A constructed mapping's arguments without its target (omegaconf's DictConfig: its `content`)."""
    if isinstance(value, dict):
        if value.get("__target__") == "omegaconf.DictConfig" and "content" in value:
            return plain(value["content"])
        return {k: plain(v) for k, v in value.items() if k != "__target__"}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value
