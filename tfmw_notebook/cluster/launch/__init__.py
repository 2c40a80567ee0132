"""Engine processes: started (forked from one import, in a private network), placed on
hosts, counted against memory, and ended; the controller they meet at."""
