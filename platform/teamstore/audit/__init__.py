"""The audit trail: transcripts, spans and a usage ledger for every team run.

    from teamstore.audit.observer import build_audit_observers

    observers = build_audit_observers(settings, engine, tracer_provider=setup_tracing(settings))
    # the session runtime calls run_started / on_item / run_finished on each

Each artefact has its own module: ``transcripts`` (one gzip JSON-lines object per run, S3 or a local
folder), ``telemetry`` (OpenTelemetry spans, content scrubbed), ``ledger`` and ``cost`` (token usage and
cost derived from a versioned price table), ``subjects`` (pseudonymous keys), ``outbox`` and ``retention``.
"""
