"""Board profiles: one JSON file per board, validated by shared/profile.py."""
