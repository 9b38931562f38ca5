package org.tpurt;

/** Status code 12 (TensorFlow's UnimplementedError). */
public class UnimplementedError extends OpError {
  public UnimplementedError(String message) {
    super(12, message);
  }
}
