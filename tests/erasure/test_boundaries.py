"""Erasure reaches the transcript store only through its interface and declared capabilities."""

from __future__ import annotations

import ast
from pathlib import Path

import teamstore.erasure

ERASURE = Path(teamstore.erasure.__file__).parent
BACKENDS = ("boto3", "botocore", "teamstore.audit.transcripts.s3", "teamstore.audit.transcripts.local")


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    return names | {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}


def test_no_erasure_module_imports_a_transcript_backend_or_the_s3_library() -> None:
    modules = sorted(ERASURE.rglob("*.py"))
    assert len(modules) > 5
    found = {path.relative_to(ERASURE).as_posix(): sorted(name for name in _imports(path)
                                                           if name.startswith(BACKENDS)) for path in modules}
    assert {module: names for module, names in found.items() if names} == {}


def test_the_transcript_step_names_no_client_bucket_or_untyped_store() -> None:
    tree = ast.parse((ERASURE / "steps" / "transcripts.py").read_text(encoding="utf-8"))
    attributes = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    names = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    assert not attributes & {"client", "bucket", "prefix", "root"}
    assert "Any" not in names and "cast" not in names
