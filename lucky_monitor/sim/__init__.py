"""Reference engine and reference trainer (Qt-free): the demo and the test oracle."""
