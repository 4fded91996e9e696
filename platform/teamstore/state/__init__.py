"""Resume state: one bounded, versioned row per (user, session), failing closed on any skew."""
