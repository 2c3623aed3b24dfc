"""Other implementations' model formats: AllenNLP ``Elmo`` state dicts, ELMoForManyLangs model folders."""
