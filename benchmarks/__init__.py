"""convbench's asv suite: thin classes that declare params and expose numbers from journaled records."""
