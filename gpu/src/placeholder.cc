// placeholder until gpu/ lands
