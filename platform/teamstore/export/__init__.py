"""The export: everything teamstore holds about one user, from every store, as one archive.

    from teamstore.app import App

    app = App(must_exist=True)
    try:
        done = await app.exporter().run("alice@example.com", Path("alice.zip"), requested_by="ticket 881")
    finally:
        await app.aclose()
    print(done.manifest.status, {name: s.records for name, s in done.manifest.stores.items()})

An access request (GDPR art. 15) or a portability request (art. 20). One exporter per store
(:class:`teamstore.export.base.Exporter`), so a new store joins with one; ``manifest.json`` names every store
covered, with counts, bytes and a checksum per file. See docs/erasure.md (*Exports*).
"""

from __future__ import annotations

from teamstore.export.base import ExportContext, Exporter, Section
from teamstore.export.coordinator import ExportCoordinator, Exported, Manifest, store_exporters

__all__ = ["ExportContext", "ExportCoordinator", "Exported", "Exporter", "Manifest", "Section", "store_exporters"]
