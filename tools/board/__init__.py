"""Board tooling: compile for a board, deploy to it, virtual and emulated boards, firmware builds, manifests."""
