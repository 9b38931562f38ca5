package org.tpurt;

import java.util.ArrayList;
import java.util.Collections;
import java.util.List;

/** Inputs for n replicas with none each: [[], [], ...] (TensorFlow's None is one replica). */
final class Replicas {
  private Replicas() {}

  static List<List<Tensor>> none(int n) {
    List<List<Tensor>> rows = new ArrayList<>();
    for (int r = 0; r < n; r++) rows.add(Collections.emptyList());
    return rows;
  }
}
