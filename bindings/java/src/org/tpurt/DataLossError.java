package org.tpurt;

/** Status code 15 (TensorFlow's DataLossError). */
public class DataLossError extends OpError {
  public DataLossError(String message) {
    super(15, message);
  }
}
