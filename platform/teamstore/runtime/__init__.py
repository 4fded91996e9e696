"""The runtime: sessions that resume, run and save a team, and the hooks audit code plugs into."""
