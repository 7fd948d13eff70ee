"""What the tests of every tier share: paths and data, event builders, the local broker, the
daemon launcher, HTTP helpers and one wait helper. Test modules import from here, never from
each other."""
