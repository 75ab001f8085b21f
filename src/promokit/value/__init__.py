"""Expected transaction value (the EOCA paper, Weng et al.): ESDPM with the ESJ loss, its baselines, and ETV
tables that ``allocate quota`` turns into a delivery plan."""
