"""Ray wiring: which actors exist, how they are made remote (in :mod:`.actors`, the one
place), and how they find each other (:mod:`.names`). Stage logic lives outside."""
