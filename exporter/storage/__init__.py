"""Object stores: reading and writing objects, presigned URLs, and the `_lakefs/` layout of every key this product writes."""
