"""Model families, loading, tiny random twins and composition."""
