"""Keys: one key and the invariants of a keyset version (:mod:`.key`), the keyset users load
(:mod:`.keyset`), its file (:mod:`.file`: atomic, locked, 0600) and its text (:mod:`.store`),
following the file as it changes (:mod:`.watch`), encryption at rest (:mod:`.encryption`) under a
KEK (:mod:`.kek`), how an SDK's secret becomes a key (:mod:`.derivation`), and rotation
(:mod:`.lifecycle`)."""
