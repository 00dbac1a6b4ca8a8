"""ElasticQuota webhooks: the in-memory quota tree, defaults on create, tree invariants, pod checks."""
