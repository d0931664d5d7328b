// placeholder until topology/ lands
