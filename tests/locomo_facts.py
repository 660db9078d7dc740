"""Facts about the shared LoCoMo files that several tests check."""

# Questions of categories 1-4 per conversation (docs/locomo.md / the data README).
QUERY_COUNTS = {
    "26": 152,
    "30": 81,
    "41": 152,
    "42": 199,
    "43": 178,
    "48": 191,
    "50": 158,
}
