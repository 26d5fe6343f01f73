"""The `hub` command line. Each command parses options into a settings object and calls one
library function; errors from `hubcli.errors` become one line plus a hint."""
