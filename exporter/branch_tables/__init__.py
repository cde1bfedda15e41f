"""A branch table: one Delta table per branch whose versions follow the branch's commits."""
