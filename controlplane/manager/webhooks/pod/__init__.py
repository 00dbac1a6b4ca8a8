"""Pod webhooks: mutation (profiles, batch resources, annotations), validation, binding admission."""
